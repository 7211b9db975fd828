// swift-tools-version: 6.0
// The adapter training toolkit: LoRA adapters over a frozen Llama-family base model, on CPU.
// Module map and the dependency rule: docs/architecture.md. Only Sources/Autograd imports COpenBLAS.
import PackageDescription

import Foundation

// Release builds are what users run; -Ounchecked drops overflow traps in hot loops.
// Swift targets baseline x86-64 (SSE2, no FMA) by default, where SIMD code runs at half speed
// and fused multiply-adds become library calls. When the building machine has AVX2 and FMA
// (checked in /proc/cpuinfo), build for Haswell-class CPUs (AVX2 + FMA); the binaries then need such a CPU too.
// ADAPTER_PORTABLE=1 builds for baseline x86-64 (binaries that run on any x86-64 machine).
let cpuInfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
let nativeX86 = ProcessInfo.processInfo.environment["ADAPTER_PORTABLE"] != "1"
    && cpuInfo.contains(" avx2") && cpuInfo.contains(" fma")
let targetCPU = ProcessInfo.processInfo.environment["ADAPTER_TARGET_CPU"] ?? "haswell"
let fast: [SwiftSetting] = [
    .unsafeFlags(["-Ounchecked"] + (nativeX86 ? ["-target-cpu", targetCPU] : []), .when(configuration: .release))
]

let package = Package(
    name: "AdapterToolkit",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Autograd", targets: ["Autograd"]),
        .library(name: "ModelAssets", targets: ["ModelAssets"]),
        .library(name: "DataSchema", targets: ["DataSchema"]),
        .library(name: "Guidance", targets: ["Guidance"]),
        // The runtime: a base loaded once, adapted models over it, sessions with guided replies.
        .library(name: "AdapterRuntime", targets: ["AdapterRuntime"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
    ],
    targets: [
        .systemLibrary(
            name: "COpenBLAS", path: "Sources/COpenBLAS", pkgConfig: "openblas",
            providers: [.apt(["libopenblas-dev", "liblapacke-dev"])]),
        .target(name: "Autograd", dependencies: ["COpenBLAS"], swiftSettings: fast),
        // Block-format matrix kernels in C: per-CPU-level code via target attributes, no unsafe flags.
        .target(name: "CBlockKernels"),
        .target(
            name: "ModelAssets",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .target(name: "DataSchema", dependencies: ["ModelAssets"], swiftSettings: fast),
        // Constrained decoding: JSON schema / choice / regex grammars as byte automata, token masks.
        .target(name: "Guidance", dependencies: ["DataSchema", "ModelAssets"], swiftSettings: fast),
        // The model definition: tensor table, LoRA config, frozen base weights, adapters and
        // drafts in every stored form, loading. Below both executors.
        .target(
            name: "ModelDefinition",
            dependencies: ["Autograd", "CBlockKernels", "ModelAssets", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .target(
            name: "Training",
            dependencies: ["Autograd", "ModelAssets", "ModelDefinition", "DataSchema", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .target(name: "Inference", dependencies: ["ModelDefinition", "Guidance", "Autograd", "ModelAssets"], swiftSettings: fast),
        // Draft distillation: the draft model, its objective and run, the KV-cache teacher.
        .target(
            name: "Distillation",
            dependencies: ["Training", "Inference", "ModelDefinition", "DataSchema", "Autograd", "ModelAssets"],
            swiftSettings: fast),
        .target(
            name: "CLISupport",
            dependencies: ["Training", "ModelDefinition", "DataSchema", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "generate",
            dependencies: ["CLISupport", "ModelDefinition", "Inference", "DataSchema", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "train-adapter",
            dependencies: ["CLISupport", "Training", "ModelDefinition", "DataSchema", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "bench-train",
            dependencies: ["CLISupport", "Inference", "Training", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "bench",
            dependencies: ["Autograd", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "adapter-data",
            dependencies: ["DataSchema", "ModelAssets", "ModelDefinition", "CLISupport", "Training", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .target(
            name: "AdapterRuntime",
            dependencies: ["Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets"],
            swiftSettings: fast),
        .testTarget(name: "AdapterRuntimeTests", dependencies: ["AdapterRuntime", "TestSupport", "Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets"]),
        .target(name: "Evaluation", dependencies: ["Training", "Inference", "ModelDefinition", "Guidance", "DataSchema", "ModelAssets", "Autograd"], swiftSettings: fast),
        .executableTarget(
            name: "evaluate-adapter",
            dependencies: ["Evaluation", "CLISupport", "ModelDefinition", "DataSchema",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .target(
            name: "Export",
            dependencies: ["Training", "Inference", "ModelDefinition", "ModelAssets", "Autograd", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .executableTarget(
            name: "export-fmadapter",
            dependencies: ["Export", "CLISupport", "Training", "ModelDefinition", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .testTarget(name: "ExportTests", dependencies: ["TestSupport", "Export", "Training", "Inference", "Distillation", "ModelDefinition", "ModelAssets", "Autograd", "DataSchema"]),
        .executableTarget(
            name: "train-draft",
            dependencies: ["CLISupport", "Distillation", "Training", "ModelDefinition", "DataSchema", "Autograd",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "make-model",
            dependencies: ["ModelAssets", "ModelDefinition", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "bench-speculative",
            dependencies: ["CLISupport", "Inference", "ModelDefinition", "DataSchema", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .testTarget(name: "DraftTests", dependencies: ["TestSupport", "Distillation", "Training", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .target(name: "TestSupport", dependencies: ["ModelAssets", "ModelDefinition", "Training", "Inference", "Autograd"], path: "Tests/TestSupport"),
        .testTarget(name: "AutogradTests", dependencies: ["Autograd"]),
        .testTarget(name: "CLISupportTests", dependencies: ["CLISupport"]),
        .testTarget(name: "ModelAssetsTests", dependencies: ["ModelAssets", "ModelDefinition"], resources: [.copy("Fixtures")]),
        .testTarget(name: "TokenizerTests", dependencies: ["ModelAssets", "ModelDefinition"], resources: [.copy("Fixtures")]),
        .testTarget(
            name: "TrainingTests", dependencies: ["TestSupport", "Training", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"],
            resources: [.copy("Fixtures")]),
        .testTarget(name: "DataSchemaTests", dependencies: ["DataSchema"], resources: [.copy("Fixtures")]),
        .testTarget(name: "ReliabilityTests", dependencies: ["TestSupport", "Training", "Inference", "Distillation", "Export", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .testTarget(name: "EvaluationTests", dependencies: ["TestSupport", "Evaluation", "Guidance", "Export", "Training", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .testTarget(name: "BlockKernelTests", dependencies: ["CBlockKernels", "ModelAssets"]),
        .testTarget(name: "ModelDefinitionTests", dependencies: ["TestSupport", "ModelDefinition", "Inference", "Training", "ModelAssets", "Autograd"]),
        .executableTarget(
            name: "bench-decode",
            dependencies: ["CLISupport", "Inference", "ModelDefinition", "Autograd", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .testTarget(name: "GuidanceTests", dependencies: ["Guidance", "DataSchema", "ModelAssets"]),
        .executableTarget(
            name: "bench-guidance",
            dependencies: ["Guidance", "DataSchema", "ModelAssets", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        // The OpenAI-compatible server: per-row adapters in one batch, continuous batching, HTTP.
        .target(
            name: "Server",
            dependencies: ["Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd",
                           .product(name: "Hummingbird", package: "hummingbird")],
            swiftSettings: fast),
        .executableTarget(
            name: "serve",
            dependencies: ["Server", "CLISupport", "Inference", "ModelDefinition",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Hummingbird", package: "hummingbird")],
            swiftSettings: fast),
        .testTarget(
            name: "ServerTests",
            dependencies: ["Server", "TestSupport", "Export", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd",
                           .product(name: "Hummingbird", package: "hummingbird")]),
        .executableTarget(
            name: "bench-kernels",
            dependencies: ["CBlockKernels", "ModelAssets", "Autograd", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
    ]
)
