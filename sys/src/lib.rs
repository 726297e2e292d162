//! Raw FFI to libcuda, libnvrtc and libibverbs, resolved at run time.
