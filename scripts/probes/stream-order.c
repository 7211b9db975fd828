// How fast two threads read weight rows from memory in the orders the decoding kernels could take
// them: row after row (one stream per thread) or four rows side by side (four streams, 144 bytes
// of each in turn, a K-quant super-block of Phi-4-mini's 1,728-byte Q4_K rows), with and without
// software prefetch. The figures in the block kernels' comments (avx512.c product, q8k.c
// vnni_tile_w4) and in docs/benchmarks.md (2026-11-30) come from it. Needs AVX-512 (64-byte loads,
// as the AVX-512 kernels read).
//
//   cc -O2 -march=native -pthread -o /tmp/stream-order scripts/probes/stream-order.c
//   /tmp/stream-order [rounds] [prefetch distance in rows, default 8]
//
// Prints per round the best of three passes over ~2 GB, in GB/s, for each order:
//   seq          row after row
//   int4-T1      four rows side by side, prefetch (T1) each row's block eight rows on
//   seq-pfT1     row after row, prefetch (T1) eight rows on
//   int4-NTA     four rows side by side, non-temporal prefetch eight rows on
//   int4-nopf    four rows side by side, no software prefetch
//   int4-linT1   four rows side by side, prefetch (T1) in address order eight rows on
//   int4-linT0   the same into L1
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static uint8_t *buf; static size_t total; static int mode; static size_t rowBytes=1728; static int PD=8;
static volatile long long sink;
typedef struct {size_t a,b;} rng;
static void *work(void *arg){
  rng *r=arg; __m512i acc=_mm512_setzero_si512();
  if(mode==0||mode==2){ // sequential, 2: with prefetch 8 rows ahead T1
    for(size_t i=r->a;i<r->b;i+=64){ if(mode==2&&(i&127)==0){_mm_prefetch((const char*)buf+i+8*rowBytes,_MM_HINT_T1);_mm_prefetch((const char*)buf+i+64+8*rowBytes,_MM_HINT_T1);}
      acc=_mm512_add_epi64(acc,_mm512_load_si512(buf+i)); }
  } else { // 4 interleaved rows, 144 bytes per step, prefetch 8 rows ahead (T1 mode1, NTA mode3, none mode4)
    for(size_t g=r->a; g+4*rowBytes<=r->b; g+=4*rowBytes)
      for(size_t b=0;b<rowBytes;b+=144)
        for(int j=0;j<4;j++){ const uint8_t *p=buf+g+j*rowBytes+b;
          if(mode==1) for(int o=0;o<144;o+=64) _mm_prefetch((const char*)p+8*rowBytes+o,_MM_HINT_T1);
          if(mode==3) for(int o=0;o<144;o+=64) _mm_prefetch((const char*)p+8*rowBytes+o,_MM_HINT_NTA);
          if(mode>=5){ const char *a=(const char*)buf+g+PD*rowBytes+(b/144*4+j)*144; for(int o=0;o<144;o+=64) {if(mode==5)_mm_prefetch(a+o,_MM_HINT_T1); else _mm_prefetch(a+o,_MM_HINT_T0);}}
          acc=_mm512_add_epi64(acc,_mm512_loadu_si512(p)); acc=_mm512_add_epi64(acc,_mm512_loadu_si512(p+64)); acc=_mm512_add_epi64(acc,_mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(p+128))));}
  }
  sink+=_mm512_reduce_add_epi64(acc); return 0;
}
int main(int argc,char**argv){
  total=(size_t)2000*1024*1024/ (4*rowBytes) * (4*rowBytes); buf=aligned_alloc(64,total+16*rowBytes); memset(buf,1,total+16*rowBytes);
  int rounds=atoi(argv[1]);
  const char *names[]={"seq","int4-T1","seq-pfT1","int4-NTA","int4-nopf","int4-linT1","int4-linT0"}; if(argc>2) PD=atoi(argv[2]);
  for(int r=0;r<rounds;r++){
    printf("%s",""); 
    for(mode=0;mode<7;mode++){
      double best=0;
      for(int rep=0;rep<3;rep++){
        size_t half=total/2/(4*rowBytes)*(4*rowBytes);
        rng a={0,half}, b={half,total};
        pthread_t t; double t0=now(); pthread_create(&t,0,work,&b); work(&a); pthread_join(t,0); double dt=now()-t0;
        double gbs=total/dt/1e9; if(gbs>best)best=gbs;
      }
      printf("%s %.1f  ",names[mode],best); fflush(stdout);
    }
    printf("\n");
  }
}
