// swift-tools-version: 6.0
// The adapter training toolkit: LoRA adapters over a frozen Llama-family base model, on CPU.
// Module map: ../shared/DESIGN.md. Only Sources/Autograd imports COpenBLAS.
import PackageDescription

// Release builds are what users run; -Ounchecked drops overflow traps in hot loops.
let fast: [SwiftSetting] = [.unsafeFlags(["-Ounchecked"], .when(configuration: .release))]

let package = Package(
    name: "AdapterToolkit",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "Autograd", targets: ["Autograd"]),
        .library(name: "ModelAssets", targets: ["ModelAssets"]),
        .library(name: "DataSchema", targets: ["DataSchema"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
    ],
    targets: [
        .systemLibrary(
            name: "COpenBLAS", path: "Sources/COpenBLAS", pkgConfig: "openblas",
            providers: [.apt(["libopenblas-dev", "liblapacke-dev"])]),
        .target(name: "Autograd", dependencies: ["COpenBLAS"], swiftSettings: fast),
        .target(
            name: "ModelAssets",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .target(name: "DataSchema", dependencies: ["ModelAssets"], swiftSettings: fast),
        .target(
            name: "Training",
            dependencies: ["Autograd", "ModelAssets", "DataSchema", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: fast),
        .target(name: "Inference", dependencies: ["Training", "Autograd", "ModelAssets"], swiftSettings: fast),
        .target(
            name: "CLISupport",
            dependencies: ["Training", "DataSchema", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "generate",
            dependencies: ["CLISupport", "Inference", "Training", "DataSchema", "ModelAssets",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "train-adapter",
            dependencies: ["CLISupport", "Training", "DataSchema", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "bench",
            dependencies: ["Autograd", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .executableTarget(
            name: "adapter-data",
            dependencies: ["DataSchema", "ModelAssets", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: fast),
        .testTarget(name: "AutogradTests", dependencies: ["Autograd"]),
        .testTarget(name: "ModelAssetsTests", dependencies: ["ModelAssets"], resources: [.copy("Fixtures")]),
        .testTarget(name: "TokenizerTests", dependencies: ["ModelAssets"], resources: [.copy("Fixtures")]),
        .testTarget(
            name: "TrainingTests", dependencies: ["Training", "Inference", "DataSchema", "ModelAssets", "Autograd"],
            resources: [.copy("Fixtures")]),
        .testTarget(name: "DataSchemaTests", dependencies: ["DataSchema"], resources: [.copy("Fixtures")]),
    ]
)
