//! What is being computed (the collective) and the steps it is built from (primitives).

/// A collective operation, with its root where it has one.
///
/// `count` everywhere in [`crate::sched`] means what it means in NCCL's API: the element count
/// of the buffer for AllReduce, Broadcast and Reduce; the per-rank *output* count (`recvcount`)
/// for ReduceScatter; the per-rank *input* count (`sendcount`) for AllGather.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast { root: u32 },
    Reduce { root: u32 },
}

impl Collective {
    /// The root rank of Broadcast and Reduce.
    pub const fn root(self) -> Option<u32> {
        match self {
            Collective::Broadcast { root } | Collective::Reduce { root } => Some(root),
            _ => None,
        }
    }

    /// NCCL's name for it, as `NCCL_DEBUG=INFO` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "AllReduce",
            Collective::ReduceScatter => "ReduceScatter",
            Collective::AllGather => "AllGather",
            Collective::Broadcast { .. } => "Broadcast",
            Collective::Reduce { .. } => "Reduce",
        }
    }

    /// Whether data from several ranks is combined with a reduction operator.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
        )
    }

    /// Elements the input buffer holds on every rank (`None` if it overflows `usize`).
    /// Broadcast reads it only on the root.
    pub const fn input_len(self, count: usize, nranks: usize) -> Option<usize> {
        match self {
            Collective::ReduceScatter => count.checked_mul(nranks),
            _ => Some(count),
        }
    }

    /// Elements the output buffer holds on every rank (`None` if it overflows `usize`).
    /// Reduce writes it only on the root.
    pub const fn output_len(self, count: usize, nranks: usize) -> Option<usize> {
        match self {
            Collective::AllGather => count.checked_mul(nranks),
            _ => Some(count),
        }
    }

    /// FIFO steps per chunk on a SIMPLE ring (NCCL's `*_CHUNKSTEPS`).
    pub const fn chunk_steps(self) -> usize {
        match self {
            Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
                crate::sched::STEPS / 2
            }
            Collective::Broadcast { .. } | Collective::Reduce { .. } => 1,
        }
    }

    /// FIFO steps per slice on a SIMPLE ring (NCCL's `*_SLICESTEPS`).
    pub const fn slice_steps(self) -> usize {
        match self {
            Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
                crate::sched::STEPS / 4
            }
            Collective::Broadcast { .. } | Collective::Reduce { .. } => 1,
        }
    }
}

/// One step of a ring program: what a rank does with one block of data.
///
/// "recv" takes the next message from the ring's previous rank, "send" gives one to the next
/// rank. "input" and "output" are the user's send and receive buffers at the step's
/// `input_offset` / `output_offset`, `len` elements. Reductions combine the received data with
/// the local input: `op(received, input)`. "post" applies the operator's final transform
/// (divide by `nranks` for an average) when the step's `post_op` is set, and the result is what
/// is both stored and sent.
///
/// | primitive            | recv | reads input | writes output          | send          |
/// |----------------------|------|-------------|------------------------|---------------|
/// | `Send`               |      | yes         |                        | input         |
/// | `Recv`               | yes  |             | received               |               |
/// | `CopySend`           |      | yes         | input                  | input         |
/// | `RecvCopySend`       | yes  |             | received               | received      |
/// | `RecvReduceSend`     | yes  | yes         |                        | op(recv, in)  |
/// | `RecvReduceCopy`     | yes  | yes         | post(op(recv, in))     |               |
/// | `RecvReduceCopySend` | yes  | yes         | post(op(recv, in))     | same as output|
/// | `Copy`               |      | yes         | post(input)            |               |
///
/// `Copy` appears only on a ring of one rank. When input and output alias (in-place
/// AllGather / Broadcast) an executor may skip `CopySend`'s copy, as NCCL does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    Send,
    Recv,
    CopySend,
    RecvCopySend,
    RecvReduceSend,
    RecvReduceCopy,
    RecvReduceCopySend,
    Copy,
}

impl Primitive {
    /// Takes a message from the previous rank on the ring.
    pub const fn receives(self) -> bool {
        matches!(
            self,
            Primitive::Recv
                | Primitive::RecvCopySend
                | Primitive::RecvReduceSend
                | Primitive::RecvReduceCopy
                | Primitive::RecvReduceCopySend
        )
    }

    /// Gives a message to the next rank on the ring.
    pub const fn sends(self) -> bool {
        matches!(
            self,
            Primitive::Send
                | Primitive::CopySend
                | Primitive::RecvCopySend
                | Primitive::RecvReduceSend
                | Primitive::RecvReduceCopySend
        )
    }

    /// Reads `input[input_offset..][..len]`.
    pub const fn reads_input(self) -> bool {
        matches!(
            self,
            Primitive::Send
                | Primitive::CopySend
                | Primitive::RecvReduceSend
                | Primitive::RecvReduceCopy
                | Primitive::RecvReduceCopySend
                | Primitive::Copy
        )
    }

    /// Writes `output[output_offset..][..len]`.
    pub const fn writes_output(self) -> bool {
        matches!(
            self,
            Primitive::Recv
                | Primitive::CopySend
                | Primitive::RecvCopySend
                | Primitive::RecvReduceCopy
                | Primitive::RecvReduceCopySend
                | Primitive::Copy
        )
    }

    /// Combines received data with the local input.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Primitive::RecvReduceSend | Primitive::RecvReduceCopy | Primitive::RecvReduceCopySend
        )
    }

    /// NCCL's name for the primitive (`prims.recvReduceCopySend(...)`), for logs.
    pub const fn name(self) -> &'static str {
        match self {
            Primitive::Send => "send",
            Primitive::Recv => "recv",
            Primitive::CopySend => "copySend",
            Primitive::RecvCopySend => "recvCopySend",
            Primitive::RecvReduceSend => "recvReduceSend",
            Primitive::RecvReduceCopy => "recvReduceCopy",
            Primitive::RecvReduceCopySend => "recvReduceCopySend",
            Primitive::Copy => "copy",
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const ALL: [Primitive; 8] = [
        Primitive::Send,
        Primitive::Recv,
        Primitive::CopySend,
        Primitive::RecvCopySend,
        Primitive::RecvReduceSend,
        Primitive::RecvReduceCopy,
        Primitive::RecvReduceCopySend,
        Primitive::Copy,
    ];

    #[test]
    fn every_primitive_has_a_source_and_a_sink() {
        for p in ALL {
            // Data comes from the input or a message, and goes to the output or a message.
            assert!(p.receives() || p.reads_input(), "{p:?}");
            assert!(p.sends() || p.writes_output(), "{p:?}");
            // Reducing needs both operands.
            if p.reduces() {
                assert!(p.receives() && p.reads_input(), "{p:?}");
            }
        }
        assert_eq!(Primitive::RecvReduceCopySend.name(), "recvReduceCopySend");
    }

    #[test]
    fn buffer_lengths_follow_nccl_counts() {
        assert_eq!(Collective::ReduceScatter.input_len(7, 3), Some(21));
        assert_eq!(Collective::ReduceScatter.output_len(7, 3), Some(7));
        assert_eq!(Collective::AllGather.input_len(7, 3), Some(7));
        assert_eq!(Collective::AllGather.output_len(7, 3), Some(21));
        assert_eq!(Collective::AllReduce.output_len(7, 3), Some(7));
        assert_eq!(Collective::AllGather.output_len(usize::MAX, 2), None);
        assert_eq!(Collective::Reduce { root: 2 }.root(), Some(2));
        assert_eq!(Collective::AllReduce.root(), None);
        assert_eq!(Collective::AllReduce.chunk_steps(), 4);
        assert_eq!(Collective::AllReduce.slice_steps(), 2);
        assert_eq!(Collective::Broadcast { root: 0 }.chunk_steps(), 1);
    }
}
