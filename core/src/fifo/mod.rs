//! The step/credit FIFO protocol (NCCL SIMPLE).
