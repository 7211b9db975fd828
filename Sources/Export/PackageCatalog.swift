// Package housekeeping over a folder of .fmadapter packages, the counterparts of the runtime's
// `isCompatible`, `compatibleAdapterIdentifiers` and `removeObsoleteAdapters`: which packages were
// made for a given base signature, and removing those that were not. Only folders whose
// metadata.json reads are judged; damaged ones are reported, never deleted.
import Foundation
import ModelDefinition

public struct CatalogEntry: Sendable {
    public var path: String
    /// nil when the package could not be read; `problem` then says why.
    public var metadata: PackageMetadata?
    public var problem: String?

    /// Whether the package was made for a base that `recognizes` its recorded signature
    /// (`BaseModel.recognizes`, which also accepts the older encoding's).
    public func isCompatible(recognizedBy recognizes: (String) -> Bool) -> Bool {
        guard let m = metadata else { return false }
        return recognizes(m.baseModelSignature)
    }
}

public enum PackageCatalog {
    /// Every `*.fmadapter` folder directly inside `folder`, sorted by name, with its metadata
    /// (or the reason it cannot be read). Only metadata.json is read, so this is cheap.
    public static func scan(_ folder: String) throws -> [CatalogEntry] {
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: folder) } catch {
            throw ExportError.io(path: folder, reason: "cannot list the folder: \(error.localizedDescription)")
        }
        return names.filter { $0.hasSuffix("." + FMAdapterPackage.fileExtension) && !$0.hasPrefix(".") }.sorted().compactMap { name in
            let path = URL(fileURLWithPath: folder).appendingPathComponent(name).path
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir), isDir.boolValue else { return nil }
            do {
                return CatalogEntry(path: path, metadata: try PackageMetadata.read(path: path + "/" + FMAdapterPackage.metadataFile), problem: nil)
            } catch {
                return CatalogEntry(path: path, metadata: nil, problem: error.localizedDescription)
            }
        }
    }

    /// Identifiers of the packages in `folder` made for the base with `signature`.
    public static func compatibleAdapterIdentifiers(in folder: String, signature: String) throws -> [String] {
        try compatibleAdapterIdentifiers(in: folder) { $0 == signature }
    }

    /// Identifiers of the packages in `folder` whose base signature `recognizes` accepts.
    public static func compatibleAdapterIdentifiers(in folder: String, recognizedBy recognizes: (String) -> Bool) throws -> [String] {
        try scan(folder).filter { $0.isCompatible(recognizedBy: recognizes) }.compactMap { $0.metadata?.adapterIdentifier }
    }

    /// Removes the readable packages in `folder` made for another base; returns their paths.
    /// Packages whose metadata cannot be read are left alone (see `scan`).
    @discardableResult
    public static func removeObsoleteAdapters(in folder: String, signature: String) throws -> [String] {
        try removeObsoleteAdapters(in: folder) { $0 == signature }
    }

    /// Removes the readable packages in `folder` whose base signature `recognizes` refuses; pass
    /// `BaseModel.recognizes` so packages signed in the older encoding for this base are kept.
    @discardableResult
    public static func removeObsoleteAdapters(in folder: String, recognizedBy recognizes: (String) -> Bool) throws -> [String] {
        var removed: [String] = []
        for entry in try scan(folder) where entry.metadata != nil && !entry.isCompatible(recognizedBy: recognizes) {
            do { try FileManager.default.removeItem(atPath: entry.path) } catch {
                throw ExportError.io(path: entry.path, reason: "cannot remove this obsolete package: \(error.localizedDescription)")
            }
            removed.append(entry.path)
        }
        return removed
    }
}
