//! Chunk and slice scheduling, ring programs.
