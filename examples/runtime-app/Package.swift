// swift-tools-version: 6.0
// An app that uses the toolkit the way any Swift package would: as a dependency by URL and
// version, through its library products (AdapterRuntime, DataSchema). SwiftPM refuses a
// versioned dependency whose targets carry unsafeFlags, so this package building at all is the
// check that the toolkit's library closure has none.
// ADAPTER_TOOLKIT_URL points at the toolkit's git repository (scripts/test-example-app.sh sets it
// to a tagged clone of the commit under test); the default is where it would be published.
import Foundation
import PackageDescription

let toolkit = ProcessInfo.processInfo.environment["ADAPTER_TOOLKIT_URL"] ?? "https://github.com/adapter-toolkit/adapter-toolkit.git"

let package = Package(
    name: "EventsApp",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: toolkit, from: "0.1.0"),
    ],
    targets: [
        .executableTarget(
            name: "events-app",
            dependencies: [
                .product(name: "AdapterRuntime", package: "adapter-toolkit"),
                .product(name: "DataSchema", package: "adapter-toolkit"),
            ]),
    ]
)
