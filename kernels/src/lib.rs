//! CUDA C++ sources of the collective kernels, embedded as text.
