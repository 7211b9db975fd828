// libFuzzer's driver entry point (compiler-rt FuzzerInterface.h). SwiftPM links an executable
// target's entry point as MODULE_main on Linux, so each harness defines that symbol and hands
// control to libFuzzer through this call instead of relying on libFuzzer's own main().
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));
