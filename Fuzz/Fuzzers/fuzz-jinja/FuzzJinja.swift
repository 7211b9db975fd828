// Fuzzes the chat-template engine: the input is a template's source, lexed, parsed, checked and
// rendered against a conversation with every kind of turn (system, tool calls, tool results,
// thinking), tools and the special tokens, under small bounds, so that any template ends in a
// rendering or a JinjaError — never a trap, a hang or unbounded memory.
// Seeds: a few written here plus the committed real templates (scripts/fuzz.sh adds them).
import CFuzzerDriver
import Foundation
import Jinja

nonisolated(unsafe) var context: [String: JinjaValue] = [:]
let environment = JinjaEnvironment(date: JinjaDate(year: 2024, month: 7, day: 26),
                                   limits: JinjaLimits(maxOutputBytes: 1 << 18, maxCallDepth: 40, maxIterations: 20_000,
                                                       maxCollectionCount: 20_000))

func dict(_ pairs: [(String, JinjaValue)]) -> JinjaValue { .dict(JinjaDict(pairs)) }

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    let call = dict([("id", .string("call_0001")), ("type", .string("function")),
                     ("function", dict([("name", .string("get_weather")), ("arguments", dict([("city", .string("Oslo"))]))]))])
    let messages: [JinjaValue] = [
        dict([("role", .string("system")), ("content", .string("Be brief."))]),
        dict([("role", .string("user")), ("content", .string("Weather in Oslo? ünï 'q'"))]),
        dict([("role", .string("assistant")), ("content", .string("")), ("tool_calls", .list([call]))]),
        dict([("role", .string("tool")), ("tool_call_id", .string("call_0001")), ("content", .string("5C"))]),
        dict([("role", .string("assistant")), ("content", .string("<think>\nhm\n</think>\n\nIt is 5C."))]),
        dict([("role", .string("user")), ("content", .string("Thanks"))]),
    ]
    let tool = dict([("type", .string("function")), ("function", dict([
        ("name", .string("get_weather")), ("description", .string("Current weather")),
        ("parameters", dict([("type", .string("object")), ("properties", dict([("city", dict([("type", .string("string"))]))])),
                             ("required", .list([.string("city")]))])),
    ]))])
    context = ["messages": .list(messages), "tools": .list([tool]), "add_generation_prompt": .bool(true),
               "bos_token": .string("<s>"), "eos_token": .string("</s>"), "enable_thinking": .bool(false)]
    if let dir = ProcessInfo.processInfo.environment["FUZZ_SEED_DIR"], !dir.isEmpty {
        let seeds = [
            "chatml.jinja": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            "features.jinja": "{%- set ns = namespace(n=0) -%}\n{%- macro m(x, y='d') -%}[{{ x|trim }}{{ y }}]{%- endmacro -%}\n{% for msg in messages if msg.role != 'system' %}{{ loop.index }}{{ m(msg.content) }}{% set ns.n = ns.n + 1 %}{% if msg.tool_calls %}{{ msg.tool_calls|tojson(indent=2) }}{% endif %}{% endfor %}{{ ns.n }}{{ tools|map(attribute='function')|map(attribute='name')|join(',') }}{% generation %}{{ 'x'.upper() ~ 'a,b'.split(',')[1:] }}{% endgeneration %}{{ raise_exception('stop') if false }}",
        ]
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (name, text) in seeds { try? Data(text.utf8).write(to: URL(fileURLWithPath: dir + "/" + name)) }
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let source = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let template = try? JinjaTemplate(source) else { return 0 }
    do {
        let r = try template.render(context, environment: environment)
        // Generation ranges must lie inside the text.
        let n = r.text.utf8.count
        for range in r.generationRanges where range.lowerBound < 0 || range.upperBound > n { fatalError("generation range \(range) outside \(n) bytes") }
    } catch {
        _ = error.description
    }
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_jinja_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
