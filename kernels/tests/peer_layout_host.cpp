// Host harness for kernels/cuda/peer_layout.cuh. Reads one query per line from stdin:
//   S h dir nch c chunk step            -> nvls_slot
//   K h dir nch c posted rank           -> nvls_counter
//   C count esize nch c                 -> peer_channel_part: start len
//   L all_reduce ccount chunk_elems nheads esize
//                                       -> nloops, then per loop and head: start len
// and prints one answer line per query. kernels/tests/peer_layout.rs compares them with
// weft_core::nvls.
#include <cstdio>

#include "../cuda/peer_layout.cuh"

int main() {
  char kind;
  while (std::scanf(" %c", &kind) == 1) {
    if (kind == 'S') {
      unsigned h, dir, c;
      unsigned long long nch, chunk, step;
      if (std::scanf("%u %u %llu %u %llu %llu", &h, &dir, &nch, &c, &chunk, &step) != 6) return 2;
      std::printf("%llu\n", weft::nvls_slot(h, dir, nch, c, chunk, step));
    } else if (kind == 'K') {
      unsigned h, dir, c, posted;
      unsigned long long nch;
      int rank;
      if (std::scanf("%u %u %llu %u %u %d", &h, &dir, &nch, &c, &posted, &rank) != 6) return 2;
      std::printf("%llu\n", weft::nvls_counter(h, dir, nch, c, posted != 0, rank));
    } else if (kind == 'C') {
      unsigned long long count, esize, nch, c, start, len;
      if (std::scanf("%llu %llu %llu %llu", &count, &esize, &nch, &c) != 4) return 2;
      weft::peer_channel_part(count, esize, nch, c, &start, &len);
      std::printf("%llu %llu\n", start, len);
    } else if (kind == 'L') {
      unsigned ar;
      unsigned long long ccount, chunk_elems, nheads, esize;
      if (std::scanf("%u %llu %llu %llu %llu", &ar, &ccount, &chunk_elems, &nheads, &esize) != 5)
        return 2;
      unsigned long long n = weft::nvls_nloops(ar != 0, ccount, chunk_elems, nheads);
      std::printf("%llu", n);
      for (unsigned long long s = 0; s < n; s++) {
        for (unsigned long long h = 0; h < nheads; h++) {
          unsigned long long start, len;
          weft::nvls_head_part(ar != 0, ccount, chunk_elems, nheads, esize, s, h, &start, &len);
          std::printf(" %llu %llu", start, len);
        }
      }
      std::printf("\n");
    } else {
      return 2;
    }
  }
  return 0;
}
