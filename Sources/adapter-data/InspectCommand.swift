// `adapter-data inspect`: what a base model is: architecture and sizes, tokenizer, chat template,
// and the base model signature that every adapter trained on it records.
import ArgumentParser
import CLISupport
import Foundation
import ModelAssets
import Training

struct InspectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Describe a base model: architecture, sizes, tokenizer, chat template and signature.")

    @OptionGroup var model: BaseModelOptions

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() throws {
        let t0 = Date()
        let base = try model.load()
        let c = base.config
        let params = base.weights.parameterCount  // (file.tensors holds only the vectors of a stored base)
        let info: [(String, Any)] = [
            ("path", base.path), ("format", base.file.format.rawValue), ("architecture", c.architecture.rawValue),
            ("layers", c.numLayers), ("hiddenSize", c.hiddenSize), ("intermediateSize", c.intermediateSize),
            ("heads", c.numHeads), ("kvHeads", c.numKVHeads), ("headDim", c.headDim), ("vocabSize", c.vocabSize),
            ("ropeTheta", c.ropeTheta), ("rmsNormEps", c.rmsNormEps), ("tiedEmbeddings", c.tieWordEmbeddings),
            ("qkvBias", c.attentionBias), ("contextLength", c.maxPositionEmbeddings), ("parameters", params),
            ("tokenizerVocabulary", base.tokenizer.vocabularySize), ("preTokenizer", base.tokenizer.sentencePiece.map { "sentencepiece (prefix \($0.prefix.rawValue))" } ?? base.tokenizer.preTokenizer.rawValue),
            ("bosToken", base.tokenizer.bosTokenId.flatMap(base.tokenizer.tokenString) ?? "none"),
            ("eosToken", base.tokenizer.eosTokenId.flatMap(base.tokenizer.tokenString) ?? "none"),
            ("chatTemplate", base.template.origin),
            ("signature", base.signature), ("loadSeconds", Date().timeIntervalSince(t0)),
        ]
        if json {
            let data = try JSONSerialization.data(withJSONObject: Dictionary(uniqueKeysWithValues: info), options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            for (k, v) in info { print("\(k): \(v)") }
        }
    }
}
