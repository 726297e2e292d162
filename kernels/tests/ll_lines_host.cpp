// Host harness for kernels/cuda/ll_lines.cuh: reads one query per line from stdin,
//   step bytes data buff_size head
// and prints "flag cleans step_lines slot_line pairs lo hi ok back credit", one line per
// query. kernels/tests/ll_lines.rs compares them with weft_core::fifo::ll.
#include <cstdio>

#include "../cuda/ll_lines.cuh"

int main() {
  unsigned long long step, bytes, data, buff, head;
  while (std::scanf("%llu %llu %llu %llu %llu", &step, &bytes, &data, &buff, &head) == 5) {
    const unsigned steps = 8;
    const unsigned flag = weft::ll_flag(step);
    const unsigned long long lines = weft::ll_step_lines(buff, steps);
    unsigned long long lo, hi, back = 0;
    weft::ll_pair_words(data, flag, &lo, &hi);
    const bool ok = weft::ll_pair_data(lo, hi, flag, &back);
    // A pair whose second line is still from the step before must not be accepted.
    unsigned long long stale_hi, unused;
    weft::ll_pair_words(data, weft::ll_flag(step - 1), &unused, &stale_hi);
    const bool torn = weft::ll_pair_data(lo, stale_hi, flag, &unused);
    std::printf("%u %d %llu %llu %llu %llu %llu %d %llu %d %d\n", flag, weft::ll_cleans(step) ? 1 : 0,
                lines, weft::ll_slot_line(step, steps, lines), weft::ll_pairs_for(bytes), lo, hi,
                ok ? 1 : 0, back, torn ? 1 : 0, weft::ll_has_credit(head, step, steps) ? 1 : 0);
  }
  return 0;
}
