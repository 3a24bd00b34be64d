"""The kernels of the TileLang tutorial, in the order a student meets them."""
CATALOGUE = ["vector_add", "gemm", "gemm_epilogue", "softmax", "flash_attention"]
