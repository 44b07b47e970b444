"""A KerasHub model as the user's model (`keras_hub:PRESET_OR_DIR`): built from a preset's config with random
weights, offline, and trained one step on its synthetic batch; a name the local cache lacks is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from .helpers import json_events, run_cli, watched


@pytest.fixture(scope="module")
def presets(keras, tmp_path_factory) -> Path:
    """Three tiny saved presets (a causal LM, a backbone alone, a classifier), written once here by Keras on
    TensorFlow (a preset is a config and weights, whichever backend wrote it): built on JAX each weight's
    initialiser is a program compiled apart (seconds), and every test below builds its models again from these."""
    keras_hub = pytest.importorskip("keras_hub")
    out = tmp_path_factory.mktemp("presets")
    with warnings.catch_warnings():  # Keras's TensorFlow variables still pass numpy 1's copy=False (each weight: one)
        warnings.simplefilter("ignore", DeprecationWarning)
        backbone = keras_hub.models.GPT2Backbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                                                 intermediate_dim=16, max_sequence_length=32)
        keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None).save_to_preset(out / "gpt2")
        images = keras_hub.models.ViTBackbone(image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2,
                                              hidden_dim=8, mlp_dim=16)
        images.save_to_preset(out / "vit")
        keras_hub.models.ViTImageClassifier(backbone=images, num_classes=3,
                                            preprocessor=None).save_to_preset(out / "vitc")
    return out


# In a worker of its own (Keras fixes its backend at import), as the JAX worker runs: TensorFlow unimportable, no
# socket may connect (nothing reaches a hub), an empty Kaggle cache but for the one preset this script puts there.
SCRIPT = textwrap.dedent("""
    import json, shutil, socket, sys
    from pathlib import Path

    def refuse(*args, **kwargs):
        raise OSError("this test reaches no network")

    socket.socket.connect = refuse
    if sys.argv[1] == "jax":
        sys.modules["tensorflow"] = None  # what the JAX worker does (JaxBackend.excludes)
    import keras, keras_hub
    from tpulab.base.errors import TpulabError
    from tpulab.workloads.user_model.keras_hub import describe, load

    out, cache = Path(sys.argv[2]), Path(sys.argv[3])
    shutil.copytree(out / "gpt2", cache / "models/keras/gpt2/keras/gpt2_base_en/2")  # a version the preset does not name
    seen = {}
    for source in ["keras_hub:" + str(out / "gpt2"), str(out / "vit"), str(out / "vitc"), "gpt2_base_en"]:
        model, (x, y) = load(source, seq_len=16)
        history = model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=1, verbose=0).history
        seen[source.split("/")[-1]] = {
            "x": keras.tree.map_structure(lambda a: [list(a.shape), str(a.dtype)], x),
            "y": keras.tree.map_structure(lambda a: [list(a.shape), str(a.dtype)], y),
            "loss": history["loss"][0], "described": describe(model), "loss_word": str(model.loss),
            "optimizer": type(model.optimizer).__name__}
    try:
        load(str(out / "gpt2"), seq_len=33)
    except TpulabError as e:
        seen["too_long"] = str(e)
    print(json.dumps(seen))
""")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_saved_preset_builds_with_random_weights_and_trains_a_step_offline(presets, tmp_path, backend):
    pytest.importorskip(backend)
    env = {**os.environ, "KERAS_BACKEND": backend, "KAGGLEHUB_CACHE": str(tmp_path / "cache"),
           "XLA_FLAGS": "--xla_backend_optimization_level=0"}  # quicker XLA compiles (see conftest's quick_compiles)
    done = subprocess.run([sys.executable, "-c", SCRIPT, backend, str(presets), str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    lm = seen["gpt2"]
    assert lm["x"] == {"token_ids": [[64, 16], "int32"], "padding_mask": [[64, 16], "int32"]}
    assert lm["y"] == [[64, 16], "int32"]  # the next token, for SparseCategoricalCrossentropy on the logits
    assert "GPT2CausalLM (task.json" in lm["described"] and "from_logits" in lm["loss_word"]
    assert lm["optimizer"] == "Adam" and lm["loss"] > 0

    vit = seen["vit"]  # a backbone alone: mean squared error against zeros of its output
    assert vit["x"] == [[64, 16, 16, 3], "float32"] and vit["y"] == [[64, 5, 8], "float32"]
    assert vit["loss_word"] == "mean_squared_error" and "ViTBackbone (backbone" in vit["described"]

    classifier = seen["vitc"]
    assert classifier["x"] == [[64, 16, 16, 3], "float32"] and classifier["y"] == [[64], "int32"]

    cached = seen["gpt2_base_en"]  # found in the Kaggle cache by its preset name, nothing asked of Kaggle
    assert "the Kaggle cache" in cached["described"] and cached["x"] == lm["x"]
    assert seen["too_long"].endswith("--seq-len 33 is longer than the 32 positions GPT2Backbone has: pass --seq-len "
                                     "32 or less")


@pytest.mark.slow
def test_a_name_the_cache_lacks_is_one_line_that_names_the_cache(keras, tmp_path, monkeypatch):
    from tpulab.base.errors import TpulabError
    from tpulab.workloads.user_model.keras_hub import load

    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path))
    with pytest.raises(TpulabError) as preset:
        load("keras_hub:gpt2_base_en", seq_len=16)  # a real preset, never downloaded here
    said = str(preset.value)
    assert "\n" not in said and said.startswith("keras_hub:gpt2_base_en: not in the local KerasHub/Kaggle cache")
    assert f"KAGGLEHUB_CACHE {tmp_path}" in said and "reaches no hub at run time" in said

    with pytest.raises(TpulabError) as typo:
        load("gpt2_bse_en", seq_len=16)
    said = str(typo.value)
    assert "\n" not in said and "KAGGLEHUB_CACHE" in said and said.endswith("did you mean gpt2_base_en?")

    (tmp_path / "empty").mkdir()
    with pytest.raises(TpulabError, match="has no config.json"):
        load(str(tmp_path / "empty"), seq_len=16)

    (tmp_path / "unknown").mkdir()  # a class this KerasHub does not have (a newer one's model, say)
    (tmp_path / "unknown" / "config.json").write_text(json.dumps({"module": "keras_hub.src.models.x", "class_name": "X",
                                                                   "config": {}, "registered_name": "keras_hub>X"}))
    with pytest.raises(TpulabError) as unknown:
        load(str(tmp_path / "unknown"), seq_len=16)
    said = str(unknown.value)
    assert "\n" not in said and said.startswith(f"keras_hub:{tmp_path / 'unknown'}: KerasHub cannot build it from ")
    assert "no class registered with Keras for keras_hub>X" in said


@pytest.mark.slow
def test_a_preset_folder_through_the_command_keeps_what_was_built_and_timed(presets, tmp_path, quick_compiles):
    """`tpulab run model --model keras_hub:DIR` on JAX: KerasHub's CausalLM from a saved preset, random weights,
    its synthetic batch said as such, XLA's FLOP count, and the record saying what was built and trained."""
    folder = presets / "gpt2"
    r = run_cli("run", "model", "--model", f"keras_hub:{folder}", "--backend", "jax", "--seq-len", "16",
                "--batch-size", "4", "--preset", "smoke", "--no-ui", "--no-save", "--json", env=watched(tmp_path / "h"),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json_events(r.stdout)[-1]
    model = out["model"]
    assert out["backend"] == "jax" and out["synthetic"] and model["name"] == f"keras_hub:{folder}"
    assert "GPT2CausalLM (task.json" in model["built"] and model["optimizer"].startswith("Adam")
    assert model["loss"] and model["parameters"] > 0 and out["summary"]["flops_per_step"] > 0
    assert out["summary"]["final_metrics"]["loss"] > 0
