/* pc_sampler: a profiler for machines without perf (the device machines have none).
 * Preloaded, it samples the program counter on SIGPROF every SAMPLER_US (default 200) of
 * process CPU time (in practice at the kernel's tick) and, at exit, writes one line per
 * sample to $SAMPLER_OUT (default samples.txt):
 *   <1 if the main thread> <object> <offset in it> <nearest exported symbol or -> [caller OFF]
 * where "caller" is the first word on the stack that points into a binary whose name
 * contains "alloca_loop" (change the strstr below for another program): for a sample in
 * libc or libcuda, the gpuhal function that called in. Resolve offsets with addr2line -f.
 *   gcc -O2 -shared -fPIC -o sampler.so tools/probe/pc_sampler.c -ldl
 *   SAMPLER_OUT=s.txt LD_PRELOAD=./sampler.so ./alloca_loop 3000000 1
 *   grep alloca_loop s.txt | awk '{print $3}' | addr2line -f -e alloca_loop | paste - - | sort | uniq -c
 * Used for tests/bench/RESULTS.md, "Where an alloca pair's time goes". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#define MAXS (1 << 22)
static unsigned long pcs[MAXS];
static unsigned char mainflag[MAXS];
#define NW 24
static unsigned long stk[1 << 16][NW];
static volatile long nsamples;
static pid_t main_tid;
static void on_prof(int sig, siginfo_t* si, void* uc_) {
  ucontext_t* uc = (ucontext_t*)uc_;
  long i = __atomic_fetch_add(&nsamples, 1, __ATOMIC_RELAXED);
  (void)sig;
  (void)si;
  if (i < MAXS) {
    pcs[i] = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
    mainflag[i] = syscall(SYS_gettid) == main_tid;
    if (i < (1 << 16)) {
      unsigned long* sp = (unsigned long*)uc->uc_mcontext.gregs[REG_RSP];
      int k;
      for (k = 0; k < NW; ++k) stk[i][k] = sp[k];
    }
  }
}
__attribute__((constructor)) static void start(void) {
  struct sigaction sa;
  timer_t t;
  struct sigevent ev;
  struct itimerspec its;
  const char* us = getenv("SAMPLER_US");
  long period = us ? atol(us) : 200;
  main_tid = syscall(SYS_gettid);
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGPROF;
  timer_create(CLOCK_PROCESS_CPUTIME_ID, &ev, &t);
  its.it_interval.tv_sec = 0;
  its.it_interval.tv_nsec = period * 1000;
  its.it_value = its.it_interval;
  timer_settime(t, 0, &its, NULL);
}
__attribute__((destructor)) static void stop(void) {
  const char* path = getenv("SAMPLER_OUT");
  FILE* f = fopen(path ? path : "samples.txt", "w");
  long n = nsamples < MAXS ? nsamples : MAXS, i;
  signal(SIGPROF, SIG_IGN);
  for (i = 0; i < n; ++i) {
    Dl_info info;
    if (dladdr((void*)pcs[i], &info) && info.dli_fname)
      fprintf(f, "%d %s 0x%lx %s", mainflag[i], info.dli_fname, pcs[i] - (unsigned long)info.dli_fbase,
              info.dli_sname ? info.dli_sname : "-");
    else
      fprintf(f, "%d ? 0x%lx -", mainflag[i], pcs[i]);
    if (i < (1 << 16)) {
      int k;
      for (k = 0; k < NW; ++k) {
        Dl_info ci;
        if (stk[i][k] > 0x10000 && dladdr((void*)stk[i][k], &ci) && ci.dli_fname &&
            strstr(ci.dli_fname, "alloca_loop")) {
          fprintf(f, " caller 0x%lx", stk[i][k] - (unsigned long)ci.dli_fbase);
          break;
        }
      }
    }
    fprintf(f, "\n");
  }
  fclose(f);
}
