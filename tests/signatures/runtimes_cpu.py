"""jax 0.10.2, openvino 2026.4.1 and onnxruntime 1.32.0 with onnx 1.23.2: the functions attnbench's runtime adapters
call, as those releases state them (read with inspect.signature from the installed wheels; annotations dropped)."""


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                          query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
                          implementation=None, return_residual=False):
    raise NotImplementedError("recorded signature only")


def scaled_dot_product_attention(query, key, value, attention_mask=None, scale=None, causal=False, name=None):
    raise NotImplementedError("recorded signature only")


def make_node(op_type, inputs, outputs, name=None, doc_string=None, domain=None, overload=None, **kwargs):
    raise NotImplementedError("recorded signature only")


class InferenceSession:
    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        raise NotImplementedError("recorded signature only")
