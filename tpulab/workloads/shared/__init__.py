"""What two workloads use, so that neither imports the other: the timed kernels and their builders per backend
(the roofline measures them, decode measures its bandwidth with their copy), the decoder blocks (decode's
model, the transformer's), and the models a library builds from a name (`model_source`, `hf_torch`: the `model`
workload's and decode's --model hf:...)."""
