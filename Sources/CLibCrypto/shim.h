// The system's libcrypto (OpenSSL 3; Debian's libssl-dev): its EVP digest interface, through
// which ModelAssets computes SHA-256 (ModelAssets/SHA256.swift).
#include <openssl/evp.h>
