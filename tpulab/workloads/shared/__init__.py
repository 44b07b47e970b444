"""What two workloads use, so that neither imports the other: the timed kernels and their builders per backend
(the roofline measures them, decode measures its bandwidth with their copy), and the decoder blocks (decode's
model, the transformer's)."""
