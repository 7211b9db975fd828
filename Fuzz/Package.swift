// swift-tools-version: 6.0
// libFuzzer harnesses for every parser of outside input (issue #10). A package of its own so that
// `swift build` of the toolkit never meets a target without `main`; the library sources are the
// toolkit's own, reached through the symlinks in Sources/ (the toolkit exports only some of its
// modules as products; fuzz-jinja, the chat-template engine's, stands apart). Build and run with ../scripts/fuzz.sh; it passes
// `-sanitize=fuzzer,address -parse-as-library`. Debug builds on purpose: integer overflow traps
// stay on and the sanitizers see every access.
import PackageDescription

let fuzzers = ["fuzz-gguf", "fuzz-safetensors", "fuzz-tokenizer-json", "fuzz-model-config", "fuzz-jsonl",
               "fuzz-checkpoint", "fuzz-fmadapter"]

let package = Package(
    name: "AdapterToolkitFuzz",
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
    ],
    targets: [
        .systemLibrary(name: "COpenBLAS", path: "Sources/COpenBLAS", pkgConfig: "openblas"),
        .target(name: "Autograd", dependencies: ["COpenBLAS"], path: "Sources/Autograd"),
        .systemLibrary(name: "CLibCrypto", path: "Sources/CLibCrypto", pkgConfig: "libcrypto"),
        .target(name: "ModelAssets", dependencies: ["CLibCrypto"], path: "Sources/ModelAssets"),
        .target(name: "DataSchema", dependencies: ["ModelAssets", "Jinja"], path: "Sources/DataSchema"),
        .target(name: "CBlockKernels", path: "Sources/CBlockKernels"),
        .target(name: "ModelDefinition", dependencies: ["Autograd", "CBlockKernels", "ModelAssets"],
                path: "Sources/ModelDefinition"),
        .target(name: "RunLog", dependencies: ["ModelAssets", .product(name: "SwiftProtobuf", package: "swift-protobuf")], path: "Sources/RunLog"),
        .target(name: "Training", dependencies: ["Autograd", "ModelAssets", "ModelDefinition", "DataSchema", "RunLog"],
                path: "Sources/Training"),
        .target(name: "Guidance", dependencies: ["DataSchema", "ModelAssets"], path: "Sources/Guidance"),
        .target(name: "Inference", dependencies: ["ModelDefinition", "Guidance", "Autograd", "CBlockKernels", "ModelAssets"], path: "Sources/Inference"),
        .target(name: "Export", dependencies: ["Training", "Inference", "ModelDefinition", "ModelAssets", "Autograd"],
                path: "Sources/Export"),
        .target(name: "CFuzzerDriver", path: "Fuzzers/CFuzzerDriver"),
        .target(name: "Jinja", path: "Sources/Jinja"),
        // The template engine's fuzzer needs nothing of the model stack.
        .executableTarget(name: "fuzz-jinja", dependencies: ["CFuzzerDriver", "Jinja"], path: "Fuzzers/fuzz-jinja"),
        .target(name: "TestSupport", dependencies: ["ModelAssets", "ModelDefinition", "Training", "Inference", "Autograd"], path: "Sources/TestSupport"),
        .target(name: "FuzzSupport", dependencies: ["TestSupport", "ModelAssets", "ModelDefinition", "DataSchema", "Training", "Export", "Autograd"],
                path: "Fuzzers/FuzzSupport"),
    ] + fuzzers.map { name in
        .executableTarget(name: name, dependencies: ["CFuzzerDriver", "FuzzSupport", "Autograd", "ModelAssets", "ModelDefinition", "DataSchema", "Training", "Export"],
                          path: "Fuzzers/\(name)")
    }
)
