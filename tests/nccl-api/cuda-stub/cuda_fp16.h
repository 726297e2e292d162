/* Empty stand-in: nccl.h includes it, the header check needs nothing from it. */
