"""A workload's parameter form, generated from its declarations, validated as the user types.

In sweep mode every field is a text field that can hold a list (`32,64,128`, or `16..1024`), and
the form checks the whole grid as the command line does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select, Static, Switch

from tpulab.backends import BackendError, article
from tpulab.base import safe
from tpulab.base.errors import UsageError
from tpulab.base.glossary import GLOSSARY
from tpulab.engine.spec import resolve
from tpulab.workloads.base import ParamError, Params, ParamSpec, Workload

if TYPE_CHECKING:
    from tpulab.engine.sweep import Sweep
    from tpulab.machine.detect import RuntimeReport

NO_PRESET = "(defaults)"
EDITED = "(edited)"  # what the preset field shows while the fields hold no preset's values


class ParamForm(VerticalScroll, can_focus=False):
    """Emits `Changed` with the checked parameters, or None and the errors by parameter.

    The form itself takes no focus (its fields do, and scroll it into view): no tab stop shows nothing."""

    class Changed(Message):
        def __init__(self, form: ParamForm, params: Params | None, errors: dict[str, str]) -> None:
            super().__init__()
            self.form = form
            self.params = params
            self.errors = errors

    class Explain(Message):
        """A field took focus: show what it means."""

        def __init__(self, spec: ParamSpec) -> None:
            super().__init__()
            self.spec = spec

    def __init__(self, workload: Workload, report: RuntimeReport, values: dict[str, Any] | None = None,
                 sweep: bool = False, preset: str | None = NO_PRESET, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workload = workload
        self.report = report
        self.sweep = sweep
        self.initial = {**workload.defaults(), **(values or {})}
        self.preset: str | None = preset  # the preset whose values the fields hold (None: none's), shown as chosen
        self.params: Params | None = None
        self.planned: Sweep | None = None  # in sweep mode, when every value and some combination can run (`plan`)
        self.impossible: list[tuple[dict[str, Any], str]] = []
        self.errors: dict[str, str] = {}
        self.validated: dict[str, Any] | None = None  # the values the last validation read

    def compose(self) -> ComposeResult:
        presets = [(NO_PRESET, NO_PRESET)] + [(name, name) for name in self.workload.presets]
        with Horizontal(classes="field"):
            yield Label("preset", classes="name")
            # Blank (its prompt) while the fields hold no preset's values: the name shown is always what they hold
            yield Select(presets, value=self._holds(self.initial) or Select.NULL, prompt=EDITED, id="preset",
                         compact=True)
        for spec in sorted(self.workload.params, key=lambda s: s.advanced):
            with Vertical(classes="param", id=f"field-{spec.name}"):
                with Horizontal(classes="field"):
                    yield Label(spec.name.replace("_", " ") + (f" [{spec.unit}]" if spec.unit else ""),
                                classes="name")
                    yield self._control(spec, self.initial[spec.name])
                yield Static(f"{spec.help}; {spec.allowed()}", classes="help", id=f"help-{spec.name}")
                yield Static(safe.text(""), classes="error", id=f"error-{spec.name}")

    def _control(self, spec: ParamSpec, value: Any) -> Input | Select[Any] | Switch:
        wid = f"param-{spec.name}"
        if self.sweep:
            return Input(value=value if isinstance(value, str) and spec.kind is not str else spec.show(value), id=wid,
                         placeholder=f"{spec.allowed()}, or a list", compact=True)
        if spec.kind is bool:
            return Switch(value=value, id=wid)
        if spec.choices:
            return Select([(c, c) for c in spec.choices], value=value, allow_blank=False, id=wid, compact=True)
        return Input(value=spec.show(value), id=wid, placeholder=spec.allowed(), compact=True)

    def on_mount(self) -> None:
        if self.sweep:
            self._grey_out_sweep()
        self.revalidate()

    # --- values -----------------------------------------------------------------------------
    def control(self, name: str) -> Input | Select[Any] | Switch:
        return cast("Input | Select[Any] | Switch", self.query_one(f"#param-{name}"))

    def raw_values(self) -> dict[str, Any]:
        return {spec.name: self.control(spec.name).value for spec in self.workload.params}

    def set_values(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            spec = self.workload.spec(name)
            typed = (spec.kind is bool or bool(spec.choices)) and not self.sweep
            self.control(name).value = value if typed or isinstance(value, str) else spec.show(value)
        self.revalidate()

    def text_values(self) -> dict[str, str]:
        """Every field as text, lists included: what a sweep-mode form starts from."""
        return {name: value if isinstance(value, str) else self.workload.spec(name).show(value)
                for name, value in self.raw_values().items()}

    def _holds(self, values: dict[str, Any]) -> str | None:
        """The preset whose values these are (the one chosen last first, then the defaults, then the others), read
        as the run would read them (`08` is 8), or None. Each field's value is compared, not where it came from: the
        command line's --preset, a workload left and come back to, a field edited, a sweep's best opened."""
        def read(name: str, raw: Any) -> Any:
            try:
                return self.workload.spec(name).parse(raw)
            except ParamError:
                return raw  # a list (sweep mode) or a bad value: no preset's
        held = {name: read(name, raw) for name, raw in values.items()}
        for name in dict.fromkeys([self.preset or NO_PRESET, NO_PRESET, *self.workload.presets]):
            if held == self.workload.preset(None if name == NO_PRESET else name):
                return name
        return None

    def _show_preset(self) -> None:
        """The preset field names what the fields now hold (a name shown is no preset chosen: nothing is filled in)."""
        self.preset = self._holds(self.raw_values())
        select = self.query_one("#preset", Select)
        with select.prevent(Select.Changed):
            if self.preset is None and not select.is_blank():
                select.clear()
            elif self.preset is not None and select.value != self.preset:
                select.value = self.preset

    def revalidate(self) -> None:
        self.validated = self.raw_values()
        self._show_preset()
        if self.sweep:
            self._revalidate_grid()
            return
        errors: dict[str, str] = {}
        params: Params = {}
        for name, raw in self.raw_values().items():
            try:
                params[name] = self.workload.spec(name).parse(raw)
            except ParamError as e:
                errors[name] = str(e)
        if not errors:
            try:
                resolve(self.workload, params, self.report)  # as the run will: every auto decided
            except ParamError as e:
                errors[e.param if e.param in params else "batch_size"] = str(e)
            except BackendError:
                pass  # no framework here runs it: Enter says which to install
        self._grey_out(self.backend(params))
        self._show_errors(errors)
        self.params = None if errors else params
        self.post_message(self.Changed(self, self.params, errors))

    def backend(self, params: Params) -> str:
        """The backend the run would take; where none can run it, the one asked for, else the article's."""
        try:
            return self.workload.backend_for(params, self.report)[0]
        except UsageError:
            framework = article()
            asked = params.get("backend", "auto")
            return framework.name if asked == "auto" and framework is not None else asked

    def _revalidate_grid(self) -> None:
        """The sweep the form holds, planned as the command line plans one (`plan`: each point resolved once,
        judged by the ceilings the lab's store keeps); a new one on each change, and after each start."""
        from tpulab.engine.sweep import DEFAULT_STEPS, plan
        from tpulab.lab.panes import lab

        errors: dict[str, str] = {}
        raw = {k: v for k, v in self.raw_values().items() if k not in self.workload.set_by_sweeps(DEFAULT_STEPS)}
        try:
            self.planned, self.impossible = plan(self.workload, raw, self.report, db=lab(self).store.path)
        except UsageError as e:  # a bad value, or a backend that cannot run here (said at the backend)
            self.planned, self.impossible = None, []
            param = e.param if isinstance(e, ParamError) else "backend"
            errors[param if param in self.initial else "batch_size"] = str(e)
        self._show_errors(errors)
        self.params = None
        self.post_message(self.Changed(self, None, errors))

    def _show_errors(self, errors: dict[str, str]) -> None:
        for spec in self.workload.params:
            message = errors.get(spec.name, "")
            error = self.query_one(f"#error-{spec.name}", Static)
            _show(error, safe.text(message))  # it quotes what was typed: shown, never read as markup
            error.display = bool(message)
            self.query_one(f"#field-{spec.name}").set_class(bool(message), "invalid")
        self.errors = errors

    def _grey_out_sweep(self) -> None:
        """In sweep mode, what the sweep sets itself (the steps of each point) is no field of the grid."""
        from tpulab.engine.sweep import DEFAULT_STEPS

        for name in self.workload.set_by_sweeps(DEFAULT_STEPS):
            self.control(name).disabled = True
            _show(self.query_one(f"#help-{name}", Static),
                  f"[i]set by the sweep: each point is one short run of {DEFAULT_STEPS} timed steps[/i]")

    def _grey_out(self, backend: str) -> None:
        """A field that means nothing on the chosen backend is disabled, and says why."""
        for spec in self.workload.params:
            if spec.only and not self.sweep:
                applies = spec.applies(backend)
                control = self.control(spec.name)
                control.disabled = not applies
                default = spec.show(spec.default) if isinstance(control, Input) else spec.default
                if not applies and control.value != default:
                    control.value = default  # a greyed-out field holds nothing the run would ignore
                _show(self.query_one(f"#help-{spec.name}", Static),
                      f"{spec.help}; {spec.allowed()}" if applies else f"[i]not on {backend}: {spec.why(backend)}[/i]")

    # --- events -----------------------------------------------------------------------------
    def _values_changed(self) -> None:
        """Validate what a field's change made of the form. Each field reports its first value as it mounts, and a
        greyed-out field reports its reset: values already validated are not validated again (nor the app's
        standby worker asked for again): 0.2 s of CPU of the lab's 0.9 s start here."""
        if self.raw_values() != self.validated:
            self.revalidate()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._values_changed()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self._values_changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.select.id == "preset":
            # Select also reports its first value on mount; blank is no preset's values, nothing to fill in
            if isinstance(event.value, str) and event.value != self.preset:
                self.preset = event.value
                self.set_values(self.workload.preset(None if self.preset == NO_PRESET else self.preset))
        else:
            self._values_changed()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        wid = getattr(event.widget, "id", None) or ""
        if wid.startswith("param-"):
            self.post_message(self.Explain(self.workload.spec(wid.removeprefix("param-"))))


def _show(line: Static, content: str | Text) -> None:
    """A field's help or error line, changed only when its text does: `Static.update` lays the whole lab out again
    (its height is auto), and the form checks every line at each keystroke."""
    if line.content != content:
        line.update(content)


def explain(spec: ParamSpec) -> str:
    """The help panel's text for a field: its line of help and the glossary entry it points to."""
    text = f"[b]{spec.name.replace('_', ' ')}[/b]: {spec.help}. Allowed: {spec.allowed()}; default {spec.show(spec.default)}."
    if spec.term and spec.term in GLOSSARY:
        text += f"\n\n[b]{spec.term}[/b]: {GLOSSARY[spec.term]}"
    return text
