"""flashinfer-python 0.7.2.post1 (the Dockerfile's FLASHINFER_VERSION): the functions and wrapper methods attnbench's
flashinfer adapter calls.

From the PyPI wheel flashinfer_python-0.7.2.post1-py3-none-any.whl (sha256 bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49;
flashinfer/_build_meta.py __version__ "0.7.2.post1"): flashinfer/prefill.py (single_prefill_with_kv_cache's
implementation, BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper), flashinfer/decode.py
(BatchDecodeWithPagedKVCacheWrapper) and flashinfer/mla/_batch_mla/_wrapper.py (BatchMLAPagedAttentionWrapper: the
same parameters as 0.7.4's), parameter lists read with `ast` (the last definition of each name, so each
`run` is the implementation after its typing overloads), annotations and decorators dropped. Against 0.7.4
(flashinfer_0_7_4.py) it lacks a few trailing keyword parameters attnbench does not pass.
"""


def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None, o_dtype=None, custom_mask=None, packed_custom_mask=None, causal=False, kv_layout='NHD', pos_encoding_mode='NONE', use_fp16_qk_reduction=False, sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None, backend='auto', return_lse=False, kv_cache_sf=None, k_scale=None, v_scale=None):
    raise NotImplementedError('recorded signature only')


class BatchPrefillWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout='NHD', use_cuda_graph=False, qo_indptr_buf=None, paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend='auto', jit_args=None, jit_kwargs=None, variant_owns_mask=False):
        raise NotImplementedError('recorded signature only')

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode='NONE', use_fp16_qk_reduction=False, sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type='float16', kv_data_type=None, o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None, max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False, uniform_q_len=None):
        raise NotImplementedError('recorded signature only')

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None, return_lse=False, lse_base='log2', lse_layout='NH', enable_pdl=None, window_left=None, sinks=None, kv_cache_sf=None, skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None):
        raise NotImplementedError('recorded signature only')


class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout='NHD', use_cuda_graph=False, qo_indptr_buf=None, kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend='auto', jit_args=None, jit_kwargs=None, variant_owns_mask=False):
        raise NotImplementedError('recorded signature only')

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode='NONE', use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None, q_data_type='float16', kv_data_type=None, o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None, fixed_split_size=None, disable_split_kv=False, seq_lens=None, seq_lens_q=None, max_token_per_sequence=None, max_sequence_kv=None, v_indptr=None, o_indptr=None, uniform_q_len=None):
        raise NotImplementedError('recorded signature only')

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None, out=None, lse=None, return_lse=False, lse_base='log2', lse_layout='NH', enable_pdl=None, kv_cache_sf=None):
        raise NotImplementedError('recorded signature only')


class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout='NHD', use_cuda_graph=False, use_tensor_cores=False, paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None, backend='auto', jit_args=None):
        raise NotImplementedError('recorded signature only')

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *deprecated_positional_args, **kwargs):
        raise NotImplementedError('recorded signature only')

    def _plan_impl(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *, pos_encoding_mode='NONE', window_left=-1, window_right=0, logits_soft_cap=None, q_data_type='float16', kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None, non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False, q_len_per_req=1, is_causal=None):
        raise NotImplementedError('recorded signature only')

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None, return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None, skip_softmax_threshold_scale_factor=None, kv_cache_sf=None):
        raise NotImplementedError('recorded signature only')


# flashinfer/mla/_batch_mla/_wrapper.py (re-exported by flashinfer/mla/__init__.py and flashinfer/__init__.py): the
# implementations under plan's and run's typing overloads, decorators (_warn_on_positional_mla_arguments,
# flashinfer_api) left out.
class BatchMLAPagedAttentionWrapper:
    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None, kv_indices=None, kv_len_arr=None, backend='auto'):
        raise NotImplementedError('recorded signature only')

    def plan(self, qo_indptr=None, kv_indptr=None, kv_indices=None, kv_len_arr=None, num_heads=None, head_dim_ckv=None, head_dim_kpe=None, page_size=None, causal=None, sm_scale=None, q_data_type=None, kv_data_type=None, use_profiler=False, *, metadata=None, cum_seq_lens_q=None, block_tables=None, seq_lens=None, max_q_len=None, query_layout=None, kv_cache_layout=None, lse_mode='none', output_dtype=None, output_scale='none', scale_mode='default', skip_softmax=False, enable_pdl=None, use_sinks=False):
        raise NotImplementedError('recorded signature only')

    def run(self, q_nope=None, q_pe=None, ckv_cache=None, kpe_cache=None, out=None, lse=None, return_lse=False, profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=False, o_scale=None, *, query=None, kv_cache=None, ckv_scale=None, ckv_scale_arr=None, kpe_scale=None, sinks=None, skip_softmax_threshold_scale_factor=None, bmm1_scale=None, bmm2_scale=None):
        raise NotImplementedError('recorded signature only')


class mla:  # noqa: N801 - the submodule flashinfer.mla, holding the wrapper
    BatchMLAPagedAttentionWrapper = BatchMLAPagedAttentionWrapper
