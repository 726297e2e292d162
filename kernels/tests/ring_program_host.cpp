// Host harness for kernels/cuda/ring_program.cuh: reads one call per line from stdin,
//   coll root count elem_size chunk_elems nchannels channel nranks rank max_slice min_slices r0 r1 ..
// and prints the program's steps, one per line, "prim post input output len slices",
// followed by "end". kernels/tests/ring_program.rs compares them with weft_core::sched.
#include <cstdio>
#include <vector>

#include "../cuda/ring_program.cuh"

int main() {
  unsigned coll, root, nchannels, channel, nranks, rank;
  unsigned long long count, esize, chunk, max_slice, min_slices;
  while (std::scanf("%u %u %llu %llu %llu %u %u %u %u %llu %llu", &coll, &root, &count, &esize, &chunk,
                    &nchannels, &channel, &nranks, &rank, &max_slice, &min_slices) == 11) {
    std::vector<int> ring(nranks);
    for (unsigned i = 0; i < nranks; i++) {
      if (std::scanf("%d", &ring[i]) != 1) return 2;
    }
    weft::RingProgram p;
    p.init(coll, root, count, esize, chunk, nchannels, channel, ring.data(), nranks, rank);
    for (unsigned long long loop = 0; loop < p.nloops; loop++) {
      for (unsigned s = 0; s < p.steps_per_loop; s++) {
        weft::Step st = p.step(loop, s);
        weft::Slicing cut;
        unsigned long long align = weft::align_elems(esize);
        cut.init(st.len, max_slice / esize / align * align, align, min_slices);
        std::printf("%u %d %llu %llu %llu", st.prim, st.post_op ? 1 : 0, st.input_offset,
                    st.output_offset, st.len);
        for (unsigned long long k = 0; k < cut.n; k++) std::printf(" %llu", cut.size(k, st.len));
        std::printf("\n");
      }
    }
    std::printf("end\n");
  }
  return 0;
}
