// swift-tools-version: 6.1
// The adapter training toolkit: LoRA adapters over a frozen Llama-family base model, on CPU.
// Module map and the dependency rule: docs/architecture.md. Only Sources/Autograd imports COpenBLAS.
import PackageDescription

// No unsafe flags in any library product's closure: a package that depends on this one by URL
// and version must build (SwiftPM refuses unsafeFlags in the targets such a dependency uses;
// scripts/test-example-app.sh checks). The hot kernels live in C (CBlockKernels), compiled per
// x86-64 feature level with target attributes and chosen at run time, so one binary runs on any
// x86-64 and uses AVX2 / AVX-512 where the CPU has them.

// The runtime executables (generate, serve) link the Swift runtime and Foundation in, on Linux:
// they run where no Swift toolchain is installed (they need glibc >= 2.36, libstdc++ and OpenBLAS),
// and a process maps only the pages of the runtime it touches instead of every page fault-around
// brings in from each shared library: `generate` on SmolLM2 peaked 5.7 MB lower, and 2.8 MB lower
// again with lld's packed relative relocations (2 MB of .rela.dyn otherwise read at every start)
// and no exported symbol table (nothing dlopens into these programs). The four libraries are
// static Foundation's own dependencies, which modules compiled against the shared runtime do not
// name in their link entries. The binaries grow from ~40 to ~105 MB on disk. Only these link steps
// differ; every module is compiled as for the other tools.
let selfContained: [LinkerSetting] = [
    .unsafeFlags([
        "-static-stdlib", "-l_FoundationCollections", "-lCoreFoundation", "-l_FoundationICU", "-l_FoundationCShims",
        "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic",
    ], .when(platforms: [.linux])),
]
let package = Package(
    name: "AdapterToolkit",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Autograd", targets: ["Autograd"]),
        .library(name: "ModelAssets", targets: ["ModelAssets"]),
        .library(name: "Jinja", targets: ["Jinja"]),
        .library(name: "DataSchema", targets: ["DataSchema"]),
        .library(name: "Guidance", targets: ["Guidance"]),
        // The runtime: a base loaded once, adapted models over it, sessions with guided replies.
        .library(name: "AdapterRuntime", targets: ["AdapterRuntime"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // TensorBoard event files (RunLog). The generated message code is committed
        // (scripts/generate-protos.sh): no build plugin, no protoc at build time.
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        // FullFoundation alone of its default traits: ConfigurationSupport (reading settings through
        // swift-configuration) builds a module serve does not use, about 70 s of a release build.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
    ],
    targets: [
        .systemLibrary(
            name: "COpenBLAS", path: "Sources/COpenBLAS", pkgConfig: "openblas",
            providers: [.apt(["libopenblas-dev"])]),
        .target(name: "Autograd", dependencies: ["COpenBLAS"]),
        // MPI for data-parallel training (train-adapter/train-draft under mpirun); only
        // Sources/DataParallel imports it, and no library product depends on it.
        .systemLibrary(
            name: "CMPI", path: "Sources/CMPI", pkgConfig: "mpi",
            providers: [.apt(["libopenmpi-dev", "openmpi-bin"])]),
        // Block-format matrix kernels in C: per-CPU-level code via target attributes, no unsafe flags.
        .target(name: "CBlockKernels"),
        .systemLibrary(
            name: "CLibCrypto", path: "Sources/CLibCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),
        .target(
            name: "ModelAssets",
            dependencies: [.target(name: "CLibCrypto", condition: .when(platforms: [.linux]))]),
        // Chat templates: a Jinja engine with transformers' semantics. No dependencies, no model knowledge.
        .target(name: "Jinja"),
        .testTarget(name: "JinjaTests", dependencies: ["Jinja"], resources: [.copy("Fixtures")]),
        .target(name: "DataSchema", dependencies: ["ModelAssets", "Jinja"]),
        // A run's log: metrics.jsonl with a header, TensorBoard event files, the loss curve.
        .target(name: "RunLog", dependencies: ["ModelAssets", .product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        // Constrained decoding: JSON schema / choice / regex grammars as byte automata, token masks.
        .target(name: "Guidance", dependencies: ["DataSchema", "ModelAssets"]),
        // The model definition: tensor table, LoRA config, frozen base weights, adapters and
        // drafts in every stored form, loading. Below both executors.
        .target(
            name: "ModelDefinition",
            dependencies: ["Autograd", "CBlockKernels", "ModelAssets"]),
        .target(
            name: "Training",
            dependencies: ["Autograd", "ModelAssets", "ModelDefinition", "DataSchema", "RunLog"]),
        .target(name: "Inference", dependencies: ["ModelDefinition", "Guidance", "Autograd", "CBlockKernels", "ModelAssets"]),
        // Draft distillation: the draft model, its objective and run, the KV-cache teacher.
        .target(
            name: "Distillation",
            dependencies: ["Training", "Inference", "ModelDefinition", "DataSchema", "Autograd", "ModelAssets", "RunLog"]),
        .target(
            name: "CLISupport",
            dependencies: ["Training", "Inference", "ModelDefinition", "DataSchema", "RunLog", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        // Data-parallel training: Training's ProcessGroup over MPI, and the executables' glue.
        .target(
            name: "DataParallel",
            dependencies: ["CMPI", "Training", "Autograd", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .testTarget(name: "DataParallelTests", dependencies: ["DataParallel", "TestSupport", "Training", "DataSchema", "ModelDefinition", "ModelAssets", "Autograd"]),
        .executableTarget(
            name: "generate",
            dependencies: ["CLISupport", "ModelDefinition", "Inference", "DataSchema", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            linkerSettings: selfContained),
        .executableTarget(
            name: "train-adapter",
            dependencies: ["CLISupport", "DataParallel", "Training", "ModelDefinition", "DataSchema", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        // The one benchmark tool: `bench engine|train|decode|kernels|speculative|guidance|guided-decoding`.
        .executableTarget(
            name: "bench",
            dependencies: ["CLISupport", "Training", "Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets",
                           "Autograd", "CBlockKernels", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "adapter-data",
            dependencies: ["DataSchema", "Jinja", "ModelAssets", "ModelDefinition", "CLISupport", "Training", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .target(
            name: "AdapterRuntime",
            dependencies: ["Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets"]),
        .testTarget(name: "AdapterRuntimeTests", dependencies: ["AdapterRuntime", "TestSupport", "Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets"]),
        .target(name: "Evaluation", dependencies: ["Training", "Inference", "ModelDefinition", "Guidance", "DataSchema", "ModelAssets", "Autograd", "RunLog"]),
        .executableTarget(
            name: "evaluate-adapter",
            dependencies: ["Evaluation", "CLISupport", "ModelDefinition", "DataSchema",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .target(
            name: "Export",
            dependencies: ["Training", "Inference", "ModelDefinition", "ModelAssets", "Autograd"]),
        .executableTarget(
            name: "export-fmadapter",
            dependencies: ["Export", "CLISupport", "Training", "ModelDefinition", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .testTarget(name: "ExportTests", dependencies: ["TestSupport", "Export", "Training", "Inference", "Distillation", "ModelDefinition", "ModelAssets", "Autograd", "DataSchema"]),
        .executableTarget(
            name: "train-draft",
            dependencies: ["CLISupport", "DataParallel", "Distillation", "Training", "ModelDefinition", "DataSchema", "Autograd",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "make-model",
            dependencies: ["ModelAssets", "ModelDefinition", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .testTarget(name: "DraftTests", dependencies: ["TestSupport", "Distillation", "Training", "RunLog", "Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .target(name: "TestSupport", dependencies: ["ModelAssets", "ModelDefinition", "Training", "Inference", "Autograd"], path: "Tests/TestSupport"),
        .testTarget(name: "AutogradTests", dependencies: ["Autograd"]),
        .testTarget(name: "CLISupportTests", dependencies: ["CLISupport", "ModelDefinition"]),
        .testTarget(name: "RunLogTests", dependencies: ["RunLog"]),
        .testTarget(name: "ModelAssetsTests", dependencies: ["ModelAssets", "ModelDefinition"], resources: [.copy("Fixtures")]),
        .testTarget(name: "TokenizerTests", dependencies: ["ModelAssets", "ModelDefinition", "DataSchema"], resources: [.copy("Fixtures")]),
        .testTarget(
            name: "TrainingTests", dependencies: ["TestSupport", "Training", "RunLog", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"],
            resources: [.copy("Fixtures")]),
        .testTarget(name: "DataSchemaTests", dependencies: ["DataSchema", "Jinja", "ModelAssets"], resources: [.copy("Fixtures")]),
        .testTarget(name: "ReliabilityTests", dependencies: ["TestSupport", "Training", "Inference", "Distillation", "Export", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .testTarget(name: "EvaluationTests", dependencies: ["TestSupport", "Evaluation", "Guidance", "Export", "Training", "Inference", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"]),
        .testTarget(name: "BlockKernelTests", dependencies: ["CBlockKernels", "ModelAssets"]),
        .testTarget(
            name: "ArchitectureTests",
            dependencies: ["TestSupport", "AdapterRuntime", "Server", "Evaluation", "Distillation", "Export", "Training", "Inference", "Guidance",
                           "ModelDefinition", "DataSchema", "ModelAssets", "Autograd"],
            resources: [.copy("Fixtures")]),
        .testTarget(name: "ModelDefinitionTests", dependencies: ["TestSupport", "ModelDefinition", "Inference", "Training", "ModelAssets", "Autograd", "CBlockKernels"]),
        .testTarget(name: "GuidanceTests", dependencies: ["Guidance", "DataSchema", "ModelAssets", "TestSupport"]),
        // The OpenAI-compatible server: per-row adapters in one batch, continuous batching, HTTP.
        .target(
            name: "Server",
            dependencies: ["Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd",
                           .product(name: "Hummingbird", package: "hummingbird")]),
        .executableTarget(
            name: "serve",
            dependencies: ["Server", "CLISupport", "Inference", "ModelDefinition",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Hummingbird", package: "hummingbird")],
            linkerSettings: selfContained),
        .testTarget(
            name: "ServerTests",
            dependencies: ["Server", "TestSupport", "Export", "Inference", "Guidance", "ModelDefinition", "DataSchema", "ModelAssets", "Autograd",
                           .product(name: "Hummingbird", package: "hummingbird")]),
    ]
)
