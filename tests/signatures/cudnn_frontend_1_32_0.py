"""nvidia-cudnn-frontend 1.32.0: the graph methods attnbench's cudnn adapter calls, as that release states them.

From the PyPI wheel nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl (its
cudnn/__init__.py __version__ "1.32.0"), imported on a CPU machine (the frontend imports without libcudnn):

- `cudnn.pygraph` is a Python class (cudnn/_pygraph.py); its methods' parameter lists are copied from
  inspect.signature with annotations dropped. Its `sdpa`, `sdpa_backward` and `sdpa_fp8` are "generic kwarg capture" builders
  (`(self, *args, name="", compute_data_type=None, out_dims=None, **kwargs)`, _pygraph.py _install_captured_builders)
  that forward every keyword, at lowering, to the C++ binding below.
- `cudnn._compiled_module.backend_graph.sdpa` / `.sdpa_backward` are nanobind methods that inspect.signature cannot
  read: their docstrings' signature lines are copied verbatim (`__doc__.splitlines()[0]`), so the test reads them
  exactly as attnbench.backends.conformance reads the installed ones.
- `cudnn.Tensor` (cudnn/graph_types.py): the setters the adapter calls on the graph's tensors.
"""

import types


class Tensor:
    def set_output(self, value):
        raise NotImplementedError("recorded signature only")

    def set_dim(self, dim):
        raise NotImplementedError("recorded signature only")

    def set_stride(self, stride):
        raise NotImplementedError("recorded signature only")

    def set_data_type(self, dtype):
        raise NotImplementedError("recorded signature only")

    def set_ragged_offset(self, ragged_offset):
        raise NotImplementedError("recorded signature only")


class pygraph:  # noqa: N801 - the library's name
    def __init__(self, name='test_graph', io_data_type=None, intermediate_data_type=None, compute_data_type=None, handle=None, sm_count=None, sm_version=None, kernel_cache=None, device_property=None, is_dynamic_shape_enabled=False, is_override_shape_enabled=False, cuda_graph_retention=None, *, is_cuda_graph_replay_expected=False, **kwargs):
        raise NotImplementedError("recorded signature only")

    def tensor(self, dim, stride=None, data_type=None, is_virtual=False, is_pass_by_value=False, ragged_offset=None, reordering_type=None, name='', uid=None, ragged_offset_multiplier=1, alignment_value=1, **kwargs):
        raise NotImplementedError("recorded signature only")

    def sdpa(self, *args, name='', compute_data_type=None, out_dims=None, **kwargs):
        raise NotImplementedError("recorded signature only")

    def sdpa_backward(self, *args, name='', compute_data_type=None, out_dims=None, **kwargs):
        raise NotImplementedError("recorded signature only")

    def sdpa_fp8(self, *args, name='', compute_data_type=None, out_dims=None, **kwargs):
        raise NotImplementedError("recorded signature only")

    def validate(self):
        raise NotImplementedError("recorded signature only")

    def build_operation_graph(self):
        raise NotImplementedError("recorded signature only")

    def create_execution_plans(self, heuristics=None):
        raise NotImplementedError("recorded signature only")

    def get_execution_plan_count(self):
        raise NotImplementedError("recorded signature only")

    def select_plan(self, index):
        raise NotImplementedError("recorded signature only")

    def get_plan_name_at_index(self, index):
        raise NotImplementedError("recorded signature only")

    def check_support(self):
        raise NotImplementedError("recorded signature only")

    def build_plans(self, *args, ctx=None, **kwargs):
        raise NotImplementedError("recorded signature only")

    def get_workspace_size(self, handle=None, override_uids=None, override_shapes=None, override_strides=None):
        raise NotImplementedError("recorded signature only")

    def execute(self, tensor_dict, workspace=None, handle=None, override_uids=None, override_shapes=None, override_strides=None, tensor_uids=None):
        raise NotImplementedError("recorded signature only")


class _Binding:
    """A nanobind method: no signature inspect can read, its signature in the first line of its docstring."""

    __signature__ = "not a signature"  # inspect.signature raises TypeError, as it raises ValueError on the real one

    def __init__(self, name, doc):
        self.__name__ = name
        self.__doc__ = doc

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("recorded signature only")


SDPA_DOC = "sdpa(self, q: cudnn._compiled_module.tensor, k: cudnn._compiled_module.tensor, v: cudnn._compiled_module.tensor, is_inference: object | None = None, attn_scale: object | None = None, bias: cudnn._compiled_module.tensor | None = None, block_mask: cudnn._compiled_module.tensor | None = None, use_alibi_mask: bool = False, use_padding_mask: bool = False, seq_len_q: cudnn._compiled_module.tensor | None = None, seq_len_kv: cudnn._compiled_module.tensor | None = None, use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False, sliding_window_length: object | None = None, diagonal_alignment: cudnn._compiled_module.diagonal_alignment = diagonal_alignment.TOP_LEFT, diagonal_band_left_bound: object | None = None, diagonal_band_right_bound: object | None = None, dropout: object | None = None, rng_dump: cudnn._compiled_module.tensor | None = None, paged_attention_k_table: cudnn._compiled_module.tensor | None = None, paged_attention_v_table: cudnn._compiled_module.tensor | None = None, paged_attention_max_seq_len_kv: object | None = None, max_total_seq_len_q: object | None = None, max_total_seq_len_kv: object | None = None, compute_data_type: cudnn._compiled_module.data_type = data_type.NOT_SET, name: str = '', score_mod: collections.abc.Callable[[cudnn._compiled_module.backend_graph, cudnn._compiled_module.tensor], cudnn._compiled_module.tensor] | None = None, generate_stats: object | None = None, implementation: cudnn._compiled_module.attention_implementation = attention_implementation.AUTO, score_max: cudnn._compiled_module.tensor | None = None, score_sum_exp: cudnn._compiled_module.tensor | None = None, sink_token: cudnn._compiled_module.tensor | None = None, unfuse_fma: bool = False, cu_seq_len_q: cudnn._compiled_module.tensor | None = None, cu_seq_len_kv: cudnn._compiled_module.tensor | None = None, stats_use_log2: bool = False) -> list[cudnn._compiled_module.tensor]"

SDPA_BACKWARD_DOC = "sdpa_backward(self, q: cudnn._compiled_module.tensor, k: cudnn._compiled_module.tensor, v: cudnn._compiled_module.tensor, o: cudnn._compiled_module.tensor, dO: cudnn._compiled_module.tensor, stats: cudnn._compiled_module.tensor, attn_scale: object | None = None, bias: cudnn._compiled_module.tensor | None = None, dBias: cudnn._compiled_module.tensor | None = None, use_alibi_mask: bool = False, use_padding_mask: bool = False, seq_len_q: cudnn._compiled_module.tensor | None = None, seq_len_kv: cudnn._compiled_module.tensor | None = None, max_total_seq_len_q: object | None = None, max_total_seq_len_kv: object | None = None, use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False, sliding_window_length: object | None = None, diagonal_alignment: cudnn._compiled_module.diagonal_alignment = diagonal_alignment.TOP_LEFT, diagonal_band_left_bound: object | None = None, diagonal_band_right_bound: object | None = None, dropout: object | None = None, rng_dump: cudnn._compiled_module.tensor | None = None, use_deterministic_algorithm: bool = False, compute_data_type: cudnn._compiled_module.data_type = data_type.NOT_SET, name: str = '', score_mod: collections.abc.Callable[[cudnn._compiled_module.backend_graph, cudnn._compiled_module.tensor], cudnn._compiled_module.tensor] | None = None, score_mod_bprop: collections.abc.Callable[[cudnn._compiled_module.backend_graph, cudnn._compiled_module.tensor], cudnn._compiled_module.tensor] | None = None, sink_token: cudnn._compiled_module.tensor | None = None, dSink_token: cudnn._compiled_module.tensor | None = None) -> list[cudnn._compiled_module.tensor]"


SDPA_FP8_DOC = "sdpa_fp8(self, q: cudnn._compiled_module.tensor, k: cudnn._compiled_module.tensor, v: cudnn._compiled_module.tensor, descale_q: cudnn._compiled_module.tensor, descale_k: cudnn._compiled_module.tensor, descale_v: cudnn._compiled_module.tensor, descale_s: cudnn._compiled_module.tensor, scale_s: cudnn._compiled_module.tensor, scale_o: cudnn._compiled_module.tensor, is_inference: object | None = None, attn_scale: object | None = None, bias: cudnn._compiled_module.tensor | None = None, use_alibi_mask: bool = False, use_padding_mask: bool = False, seq_len_q: cudnn._compiled_module.tensor | None = None, seq_len_kv: cudnn._compiled_module.tensor | None = None, use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False, sliding_window: object | None = None, diagonal_alignment: cudnn._compiled_module.diagonal_alignment = diagonal_alignment.TOP_LEFT, left_bound: object | None = None, right_bound: object | None = None, dropout: object | None = None, rng_dump: cudnn._compiled_module.tensor | None = None, paged_attention_k_table: cudnn._compiled_module.tensor | None = None, paged_attention_v_table: cudnn._compiled_module.tensor | None = None, paged_attention_max_seq_len_kv: object | None = None, max_total_seq_len_q: object | None = None, max_total_seq_len_kv: object | None = None, compute_data_type: cudnn._compiled_module.data_type = data_type.NOT_SET, name: str = '', fn: collections.abc.Callable[[cudnn._compiled_module.backend_graph, cudnn._compiled_module.tensor], cudnn._compiled_module.tensor] | None = None, generate_stats: object | None = None, score_max: cudnn._compiled_module.tensor | None = None, score_sum_exp: cudnn._compiled_module.tensor | None = None, sink_token: cudnn._compiled_module.tensor | None = None, unfuse_fma: bool = False, implementation: cudnn._compiled_module.attention_implementation = attention_implementation.AUTO, cu_seq_len_q: cudnn._compiled_module.tensor | None = None, cu_seq_len_kv: cudnn._compiled_module.tensor | None = None, stats_use_log2: bool = False) -> list[cudnn._compiled_module.tensor]"


class backend_graph:  # noqa: N801 - the library's name
    sdpa = _Binding("sdpa", SDPA_DOC)
    sdpa_fp8 = _Binding("sdpa_fp8", SDPA_FP8_DOC)
    sdpa_backward = _Binding("sdpa_backward", SDPA_BACKWARD_DOC)


_compiled_module = types.ModuleType("cudnn._compiled_module")
_compiled_module.backend_graph = backend_graph
