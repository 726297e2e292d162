//! The mesh handle: a multi-address NET handle that fits NCCL_NET_HANDLE_MAXSIZE.
