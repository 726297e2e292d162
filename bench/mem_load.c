/* Memory-bandwidth load for experiments: T threads memcpy 256 MiB buffers for S seconds, then
 * print the GB/s copied. Used to see how much a busy CPU memory system slows the GPUs' reads
 * and writes of pinned host memory (docs/benchmarks.md, "Where the time goes").
 *
 *   cc -O2 -pthread -o mem_load bench/mem_load.c && ./mem_load 8 45
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256
#define BUFFER ((size_t)256 << 20)

static double seconds;
static double copied[MAX_THREADS];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void* copy_loop(void* arg) {
  long i = (long)arg;
  char* from = malloc(BUFFER);
  char* to = malloc(BUFFER);
  if (!from || !to) return NULL;
  memset(from, 1, BUFFER);
  memset(to, 2, BUFFER);
  double start = now();
  while (now() - start < seconds) {
    memcpy(to, from, BUFFER);
    /* Keep the compiler from dropping a copy nobody reads. */
    __asm__ volatile("" ::: "memory");
    copied[i] += (double)BUFFER;
  }
  free(from);
  free(to);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 0;
  seconds = argc > 2 ? atof(argv[2]) : 0;
  if (threads < 1 || threads > MAX_THREADS || seconds <= 0) {
    fprintf(stderr, "usage: %s THREADS(1..%d) SECONDS\n", argv[0], MAX_THREADS);
    return 2;
  }
  pthread_t th[MAX_THREADS];
  double start = now();
  for (long i = 0; i < threads; i++) pthread_create(&th[i], NULL, copy_loop, (void*)i);
  double total = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    total += copied[i];
  }
  double rate = total / (now() - start) / 1e9;
  printf("mem_load: %d threads, %.1f GB/s copied (%.1f GB/s of memory traffic)\n", threads, rate,
         2 * rate);
  return 0;
}
