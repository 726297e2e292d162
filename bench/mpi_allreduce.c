/*
 * MPI_Allreduce (float, sum) timed the way nccl-tests' all_reduce_perf times NCCL, and printed
 * in its columns, so that `weft perf all-reduce` and Open MPI can be compared line by line.
 *
 *   mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 *   mpirun -np 4 ./mpi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5
 *
 * For every size: the result is checked once, every element, out of place and in place
 * (MPI_IN_PLACE), against a reference each rank computes alone (it regenerates every rank's
 * seeded data); then `warmup` untimed and `iters` timed calls. The time printed is the mean
 * over ranks of each rank's wall time per call (nccl-tests' default `-a 1`); algbw = size /
 * time, busbw = algbw * 2(n-1)/n, in GB/s (1e9 bytes). Exits 1 if any element was wrong.
 */
#include <mpi.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct options {
    size_t min_bytes, max_bytes;
    size_t factor;
    int iters, warmup;
};

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n|--iters N] [-w|--warmup N]\n"
            "  sizes in bytes with an optional K, M or G suffix (powers of 1024); "
            "defaults -b 8 -e 64M -f 2 -n 20 -w 5\n",
            prog);
}

/* "64M" -> 67108864. Returns 0 on a malformed or zero size. */
static size_t parse_size(const char *text) {
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return 0;
    unsigned long long scale = 1;
    switch (*end) {
        case '\0': break;
        case 'k': case 'K': scale = 1ULL << 10; end++; break;
        case 'm': case 'M': scale = 1ULL << 20; end++; break;
        case 'g': case 'G': scale = 1ULL << 30; end++; break;
        default: return 0;
    }
    if (*end != '\0' || value > SIZE_MAX / scale) return 0;
    return (size_t)(value * scale);
}

static int parse_count(const char *text, int min) {
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < min || value > 1000000) return -1;
    return (int)value;
}

static int parse_options(int argc, char **argv, struct options *opt) {
    *opt = (struct options){.min_bytes = 8, .max_bytes = 64u << 20, .factor = 2, .iters = 20,
                            .warmup = 5};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "mpi_allreduce: %s needs a value\n", flag);
            return -1;
        }
        const char *value = argv[++i];
        if (!strcmp(flag, "-b")) opt->min_bytes = parse_size(value);
        else if (!strcmp(flag, "-e")) opt->max_bytes = parse_size(value);
        else if (!strcmp(flag, "-f")) opt->factor = parse_size(value);
        else if (!strcmp(flag, "-n") || !strcmp(flag, "--iters")) opt->iters = parse_count(value, 1);
        else if (!strcmp(flag, "-w") || !strcmp(flag, "--warmup")) opt->warmup = parse_count(value, 0);
        else {
            fprintf(stderr, "mpi_allreduce: unknown option %s\n", flag);
            return -1;
        }
    }
    if (opt->min_bytes < sizeof(float) || opt->max_bytes < opt->min_bytes || opt->factor < 2 ||
        opt->iters < 1 || opt->warmup < 0) {
        fprintf(stderr, "mpi_allreduce: need 4 <= MIN <= MAX, FACTOR >= 2, iters >= 1, warmup >= 0\n");
        return -1;
    }
    return 0;
}

/* xorshift64*: each (rank, size) has its own stream, so every rank can regenerate any rank's
 * data. Values are k/8 with |k| <= 8000: exact in float, and so is any sum of up to 2000 of
 * them in any order, which lets the check demand exact equality whatever MPI's reduction order. */
static uint64_t stream_seed(int rank, size_t count) {
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)rank * 0xbf58476d1ce4e5b9ULL) ^
                 ((uint64_t)count * 0x94d049bb133111ebULL);
    return s ? s : 1;
}

static float next_value(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    uint64_t r = (x * 0x2545f4914f6cdd1dULL) >> 32;
    return (float)((int)(r % 16001u) - 8000) / 8.0f;
}

static void fill_rank_data(float *buf, size_t count, int rank) {
    uint64_t state = stream_seed(rank, count);
    for (size_t i = 0; i < count; i++) buf[i] = next_value(&state);
}

/* Elements of `result` that differ from the sum of every rank's data, plus elements of
 * `input` (if given) that differ from this rank's own data: an out-of-place all-reduce must
 * not write its input. */
static long long count_wrong(const float *result, const float *input, size_t count, int rank,
                             int nranks, uint64_t *states) {
    for (int r = 0; r < nranks; r++) states[r] = stream_seed(r, count);
    long long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0.0f, own = 0.0f;
        for (int r = 0; r < nranks; r++) {
            float v = next_value(&states[r]);
            want += v;
            if (r == rank) own = v;
        }
        if (result[i] != want) wrong++;
        if (input && input[i] != own) wrong++;
    }
    return wrong;
}

static void check_mpi(int rc, const char *what, size_t bytes) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "mpi_allreduce: %s failed at %zu bytes: %s\n", what, bytes, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Mean over ranks of the wall time per call, in microseconds. */
static double time_allreduce(const float *send, float *recv, size_t count, const struct options *opt,
                             int nranks) {
    const void *src = send ? (const void *)send : MPI_IN_PLACE;
    size_t bytes = count * sizeof(float);
    for (int i = 0; i < opt->warmup; i++)
        check_mpi(MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce (warmup)", bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < opt->iters; i++)
        check_mpi(MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce", bytes);
    double mine = (MPI_Wtime() - start) / opt->iters * 1e6, sum = 0.0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / nranks;
}

static void print_result(double time_us, size_t bytes, int nranks, long long wrong) {
    char time_text[32];
    /* nccl-tests' precision: fewer decimals as the time grows, so the column stays 7 wide. */
    snprintf(time_text, sizeof time_text, time_us >= 10000.0 ? "%7.0f" : time_us >= 100.0 ? "%7.1f" : "%7.2f",
             time_us);
    double algbw = (double)bytes / 1e9 / (time_us / 1e6);
    double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    printf("  %7s  %6.2f  %6.2f  %6lld", time_text, algbw, busbw, wrong);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, nranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    struct options opt;
    if (parse_options(argc, argv, &opt) != 0) {
        if (rank == 0) usage(argv[0]);
        MPI_Finalize();
        return 2;
    }
    size_t max_count = opt.max_bytes / sizeof(float);
    if (max_count > (size_t)INT32_MAX) {
        if (rank == 0) fprintf(stderr, "mpi_allreduce: -e %zu is over MPI's int count\n", opt.max_bytes);
        MPI_Finalize();
        return 2;
    }
    float *send = malloc(max_count * sizeof(float));
    float *recv = malloc(max_count * sizeof(float));
    uint64_t *states = malloc((size_t)nranks * sizeof(uint64_t));
    if (!send || !recv || !states) {
        fprintf(stderr, "mpi_allreduce: rank %d cannot allocate 2 x %zu bytes\n", rank, opt.max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    if (rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(version, &len);
        char *newline = strchr(version, '\n');
        if (newline) *newline = '\0';
        printf("# mpi_allreduce: nranks %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
               "validation: 1\n# %s\n#\n",
               nranks, opt.min_bytes, opt.max_bytes, opt.factor, opt.warmup, opt.iters, version);
        printf("#%74s%31s\n", "out-of-place", "in-place");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }

    long long total_wrong = 0;
    double busbw_sum = 0.0;
    int sizes = 0;
    for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= opt.factor) {
        size_t count = bytes / sizeof(float), used = count * sizeof(float);
        long long wrong[2] = {0, 0}, all_wrong[2] = {0, 0};

        fill_rank_data(send, count, rank);
        for (size_t i = 0; i < count; i++) recv[i] = NAN; /* an element never written shows */
        check_mpi(MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce (check, out of place)", used);
        wrong[0] = count_wrong(recv, send, count, rank, nranks, states);

        fill_rank_data(recv, count, rank);
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce (check, in place)", used);
        wrong[1] = count_wrong(recv, NULL, count, rank, nranks, states);
        MPI_Allreduce(wrong, all_wrong, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);

        double oop_us = time_allreduce(send, recv, count, &opt, nranks);
        double ip_us = time_allreduce(NULL, recv, count, &opt, nranks);
        if (rank == 0) {
            printf("%12zu  %12zu  %8s  %6s  %6d", used, count, "float", "sum", -1);
            print_result(oop_us, used, nranks, all_wrong[0]);
            print_result(ip_us, used, nranks, all_wrong[1]);
            printf("\n");
            fflush(stdout);
        }
        total_wrong += all_wrong[0] + all_wrong[1];
        /* nccl-tests averages the bus bandwidth of both columns over every size. */
        busbw_sum += ((double)used / 1e9 / (oop_us / 1e6) + (double)used / 1e9 / (ip_us / 1e6)) * 2.0 *
                     (nranks - 1) / nranks;
        sizes += 2;
        if (bytes > opt.max_bytes / opt.factor) break; /* the next size would overflow or pass MAX */
    }
    if (rank == 0) {
        printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n", sizes ? busbw_sum / sizes : 0.0);
    }
    free(send);
    free(recv);
    free(states);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
