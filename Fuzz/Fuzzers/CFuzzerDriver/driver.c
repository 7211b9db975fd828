// The declaration lives in include/CFuzzerDriver.h; libFuzzer (-sanitize=fuzzer) defines it.
#include "CFuzzerDriver.h"
