// Every executable's --help, as a user sees it: each tool of Package.swift and each of its
// subcommands (from the command's own definition, `--experimental-dump-help`) renders its help
// and exits 0, the help lists every argument the definition has, each with a description, a flag
// the help text mentions is one the tool has, and every option that takes an adapter names each
// form the loader reads — the one list in ModelDefinition (`Adapter.formDescriptions`) that the
// loader's own error names too. Runs the built executables beside the test bundle, as the
// reliability tests do; `swift build` / `swift test` build them with the same configuration.
import Foundation
import ModelDefinition
import XCTest

final class HelpTextTests: XCTestCase {
    /// The repository root (this file is Tests/CLISupportTests/HelpTextTests.swift).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The executable targets Package.swift declares.
    static func tools() throws -> [String] {
        let manifest = try String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let regex = try NSRegularExpression(pattern: #"\.executableTarget\(\s*name:\s*"([^"]+)""#)
        let names = regex.matches(in: manifest, range: NSRange(manifest.startIndex..., in: manifest)).map {
            String(manifest[Range($0.range(at: 1), in: manifest)!])
        }
        XCTAssertGreaterThanOrEqual(names.count, 9, "Package.swift's executable targets were not found")
        return names.sorted()
    }

    /// The folder holding the built executables: beside the test bundle (or a few levels up).
    static func productsDirectory() throws -> URL {
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: dir.appendingPathComponent("generate").path) { return dir }
            dir = dir.deletingLastPathComponent()
        }
        throw XCTSkip("the executables were not found beside the test bundle (\(CommandLine.arguments[0])); build every product first (`swift build` with the same configuration) so their --help can be checked")
    }

    struct Help {
        let command: String
        let text: String
        /// Option synopsis ("--base-model, --model <base-model>") to its description, whitespace collapsed.
        var options: [(synopsis: String, names: [String], description: String)] = []
        var subcommands: [String] = []
        /// The command's arguments as its definition lists them (`--experimental-dump-help`):
        /// the names a user types ("--base-model", "<file>") and the abstract.
        var defined: [(names: [String], abstract: String)] = []
    }

    /// Runs `tool arguments...` with a wide terminal (no wrapping inside a phrase): exit status and output.
    func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = try Self.productsDirectory().appendingPathComponent(tool)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["COLUMNS"] = "400"
        process.environment = environment
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// `tool subcommands... --help`, checked to render, and parsed.
    func help(_ tool: String, _ subcommands: [String] = []) throws -> Help {
        let (status, text) = try run(tool, subcommands + ["--help"])
        let command = ([tool] + subcommands).joined(separator: " ")
        XCTAssertEqual(status, 0, "\(command) --help exited \(status):\n\(text)")
        XCTAssertTrue(text.contains("USAGE:"), "\(command) --help printed no usage:\n\(text)")
        return Self.parse(text, command: command)
    }

    /// swift-argument-parser's layout: section headers in capitals ending in ':', entries indented
    /// two spaces, a description after two or more spaces on the same line or on the lines below,
    /// indented further.
    static let column = 26

    static func parse(_ text: String, command: String) -> Help {
        var help = Help(command: command, text: text)
        let lines = text.components(separatedBy: "\n")
        var section = ""
        var i = 0
        while i < lines.count {
            let line = lines[i]
            if !line.hasPrefix(" "), line.hasSuffix(":"), line == line.uppercased() {
                section = line
                i += 1
                continue
            }
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { i += 1; continue }
            // the description column is 26: a synopsis that fits leaves it on the same line (one
            // space apart at the least), a longer one moves it to the lines below
            let chars = Array(line)
            let sameLine = chars.count > column && chars[column - 1] == " " && chars[column] != " "
            let synopsis = String(sameLine ? chars[2..<column] : chars[2...]).trimmingCharacters(in: .whitespaces)
            var description = sameLine ? String(chars[column...]) : ""
            var j = i + 1
            while j < lines.count, lines[j].hasPrefix("   "), !lines[j].trimmingCharacters(in: .whitespaces).isEmpty {
                description += " " + lines[j].trimmingCharacters(in: .whitespaces)
                j += 1
            }
            description = description.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            if section == "SUBCOMMANDS:" {
                // "export (default)   Write ..." — the name is the first word; the closing
                // "See 'tool help <subcommand>' ..." line is not an entry
                if let name = synopsis.split(separator: " ").first, name.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }) {
                    help.subcommands.append(String(name))
                }
            } else if synopsis.hasPrefix("-") {
                let names = synopsis.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "/" }).map(String.init).filter { $0.hasPrefix("-") }
                help.options.append((synopsis, names, description))
            } else if synopsis.hasPrefix("<") {
                help.options.append((synopsis, [], description))
            }
            i = j
        }
        return help
    }

    /// Every tool and subcommand's help, depth first, with the arguments its definition has: the
    /// command tree comes from `tool --experimental-dump-help` (swift-argument-parser's own JSON
    /// of the commands), not from the help text being checked.
    func allHelps() throws -> [Help] {
        var out: [Help] = []
        func walk(_ tool: String, _ path: [String], _ node: [String: Any]) throws {
            var h = try help(tool, path)
            for argument in node["arguments"] as? [[String: Any]] ?? [] where argument["shouldDisplay"] as? Bool ?? true {
                let names = (argument["names"] as? [[String: Any]] ?? []).compactMap { n -> String? in
                    guard let name = n["name"] as? String else { return nil }
                    return (n["kind"] as? String == "short" ? "-" : "--") + name
                }
                let label = names.isEmpty ? ["<\(argument["valueName"] as? String ?? "?")>"] : names
                h.defined.append((label, argument["abstract"] as? String ?? ""))
            }
            out.append(h)
            for sub in node["subcommands"] as? [[String: Any]] ?? [] {
                guard let name = sub["commandName"] as? String, name != "help" else { continue }
                try walk(tool, path + [name], sub)
            }
        }
        for tool in try Self.tools() {
            let (status, json) = try run(tool, ["--experimental-dump-help"])
            XCTAssertEqual(status, 0, "\(tool) --experimental-dump-help exited \(status)")
            let dump = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
            let root = try XCTUnwrap(dump?["command"] as? [String: Any], "\(tool) --experimental-dump-help: no command")
            try walk(tool, [], root)
        }
        return out
    }

    func testEveryToolsHelpRendersAndListsEveryOptionWithItsHelp() throws {
        let helps = try allHelps()
        XCTAssertEqual(Set(helps.map { $0.command.split(separator: " ")[0] }).count, try Self.tools().count, "a tool's help was not read")
        for h in helps {
            if !h.command.contains(" ") { XCTAssertTrue(h.text.hasPrefix("OVERVIEW:"), "\(h.command) --help has no abstract (OVERVIEW):\n\(h.text)") }
            XCTAssertFalse(h.defined.isEmpty, "\(h.command): its definition has no argument (not even --help)")
            for argument in h.defined where argument.names != ["-h", "--help"] {
                // listed in the help under the same names, with a description the definition gave it
                let listed = h.options.first { o in argument.names.allSatisfy { name in o.names.contains(name) || o.synopsis == name } }
                XCTAssertNotNil(listed, "\(h.command) --help does not list \(argument.names.joined(separator: ", "))")
                XCTAssertFalse(argument.abstract.isEmpty, "\(h.command): \(argument.names.joined(separator: ", ")) has no help text")
                if let listed { XCTAssertFalse(listed.description.isEmpty, "\(h.command) --help shows \(listed.synopsis) without a description") }
            }
        }
        // the benchmark tool is one executable with a subcommand per benchmark
        let bench = helps.filter { $0.command.hasPrefix("bench ") }.map { String($0.command.dropFirst(6)) }
        XCTAssertEqual(Set(bench), ["engine", "train", "decode", "kernels", "speculative", "guidance", "guided-decoding"])
    }

    /// The parser the checks rely on, on swift-argument-parser's layout: a description on the
    /// same line, one below a long synopsis, an option with none, and the subcommand list.
    func testTheHelpParserReadsTheLayout() {
        let text = """
            OVERVIEW: A tool.

            USAGE: tool <subcommand>

            OPTIONS:
              --eval-data <eval-data> Eval data (JSONL).
              --base-model, --model <base-model>
                                      Base model: a .gguf file
                                      or a folder.
              --share-prefix/--no-share-prefix
                                      Share it. (default: --share-prefix)
              --bare
              -h, --help              Show help information.

            SUBCOMMANDS:
              export (default)        Write a package.
              list                    List packages.

              See 'tool help <subcommand>' for detailed help.
            """
        let h = Self.parse(text, command: "tool")
        XCTAssertEqual(h.options.map(\.synopsis), ["--eval-data <eval-data>", "--base-model, --model <base-model>", "--share-prefix/--no-share-prefix", "--bare", "-h, --help"])
        XCTAssertEqual(h.options.map(\.description), ["Eval data (JSONL).", "Base model: a .gguf file or a folder.", "Share it. (default: --share-prefix)", "", "Show help information."])
        XCTAssertEqual(h.options[2].names, ["--share-prefix", "--no-share-prefix"])
        XCTAssertEqual(h.subcommands, ["export", "list"])
    }

    /// A flag a help text names (in a description or the discussion) is one of that tool's own,
    /// unless another program's name comes just before it ("use it with generate --draft-checkpoint").
    func testHelpNamesOnlyFlagsTheToolHas() throws {
        let helps = try allHelps()
        let tools = try Self.tools()
        let others = tools + ["llama-bench", "llama-completion", "mpirun", "tensorboard"]
        let flag = try NSRegularExpression(pattern: #"(?<![\w-])(--[a-z][a-z0-9-]*)"#)
        for h in helps {
            let tool = String(h.command.split(separator: " ")[0])
            let own = Set(helps.filter { $0.command.split(separator: " ")[0] == Substring(tool) }.flatMap { $0.options.flatMap(\.names) })
            // prose only: the overview and discussion, and option descriptions (not the usage line or synopses)
            let prose = h.text.components(separatedBy: "USAGE:")[0] + " " + h.options.map(\.description).joined(separator: " ")
            for m in flag.matches(in: prose, range: NSRange(prose.startIndex..., in: prose)) {
                let name = String(prose[Range(m.range(at: 1), in: prose)!])
                if own.contains(name) { continue }
                let before = prose[..<Range(m.range, in: prose)!.lowerBound].split(separator: " ").suffix(3).joined(separator: " ")
                if others.contains(where: { before.contains($0) }) { continue }
                XCTFail("\(h.command) --help mentions \(name), which \(tool) does not take (…\(before) \(name))")
            }
        }
    }

    /// The options that take an adapter, with every form `Adapter.load` reads named in their help.
    static let adapterOptions: [(command: String, option: String)] = [
        ("bench guided-decoding", "--adapter"),
        ("bench speculative", "--checkpoint"),
        ("evaluate-adapter", "--checkpoint"),
        ("export-fmadapter export", "--checkpoint"),
        ("export-fmadapter fuse", "--checkpoint"),
        ("export-fmadapter logits", "--checkpoint"),
        ("generate", "--checkpoint"),
        ("serve", "--adapters"),
        ("train-draft", "--checkpoint"),
        ("train-adapter", "--init-checkpoint"),
        ("train-adapter", "--reference-checkpoint"),
    ]

    func testEveryAdapterOptionNamesTheFormsTheLoaderReads() throws {
        let helps = try allHelps()
        XCTAssertEqual(Adapter.formDescriptions.count, 3)
        var found: [(String, String)] = []
        for h in helps {
            for o in h.options where o.names.contains(where: { ["--checkpoint", "--adapter", "--adapters", "--init-checkpoint", "--reference-checkpoint"].contains($0) }) {
                found.append((h.command, o.names.first { $0.hasPrefix("--") }!))
                for form in Adapter.formDescriptions {
                    XCTAssertTrue(o.description.contains(form),
                                  "\(h.command) \(o.synopsis): the help does not name the adapter form \"\(form)\" that the loader reads: \(o.description)")
                }
            }
        }
        // every option named like one (a new tool's included) is in the list above, and the list is complete
        XCTAssertEqual(found.map { "\($0.0) \($0.1)" }.sorted(), Self.adapterOptions.map { "\($0.command) \($0.option)" }.sorted())
    }

    func testTheLoaderNamesTheSameFormsWhenAPathIsNone() {
        XCTAssertThrowsError(try Adapter.load("/nonexistent/adapter-final.safetensors")) { error in
            let message = error.localizedDescription
            for form in Adapter.formDescriptions {
                XCTAssertTrue(message.contains(form), "the loader's error does not name \"\(form)\": \(message)")
            }
            XCTAssertTrue(message.hasPrefix("/nonexistent/adapter-final.safetensors"), message)
        }
    }
}
