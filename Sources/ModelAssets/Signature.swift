// The base model signature: lowercase hex SHA-256 over a canonical encoding of the config's
// computational fields and every tensor (Hugging Face names and layout, fp32 little-endian), so
// one set of weights gets one signature whether it came from GGUF or a Hugging Face folder.
// The file name, format, architecture label and context length are left out on purpose.
import Crypto
import Foundation

public enum BaseModelSignature {
    /// Bumped whenever the encoding below changes.
    public static let encodingVersion = "adapter-toolkit/base-model-signature/v1"

    /// Encoding, all integers little-endian UInt64, all reals as Float32 bit patterns (GGUF
    /// stores rope base and norm epsilon as float32, config.json as decimal: both round alike):
    /// version string; hiddenSize, intermediateSize, numLayers, numHeads, numKVHeads, headDim,
    /// vocabSize; ropeTheta, rmsNormEps; tieWordEmbeddings, attentionBias (0/1); rope scaling
    /// (kind string or "none", factor, low, high, original context; absent values as 0); tensor
    /// count; then per tensor in UTF-8 byte order of names: name, rank, dims, fp32 data.
    /// Strings are a UInt64 byte length followed by UTF-8.
    /// The architecture label is omitted: llama and mistral with equal weights compute the same
    /// function, and `attentionBias` already captures what distinguishes qwen2.
    public static func compute(config: ModelConfig, tensors: [String: HostTensor]) -> String {
        compute(config: config, names: Array(tensors.keys)) { tensors[$0]! }
    }

    /// The same digest with the tensors fetched one at a time by name.
    public static func compute(config: ModelConfig, names: [String], tensor: (String) -> HostTensor) -> String {
        compute(config: config, names: names, shape: { tensor($0).shape }) { name, feed in
            tensor(name).data.withUnsafeBufferPointer { feed($0) }
        }
    }

    /// The same digest with each tensor's shape given by `shape` and its float32 values (row-major,
    /// Hugging Face layout) handed to the hasher in consecutive pieces by `values(name, feed)`: a
    /// stored base dequantizes a few rows at a time, so not even one tensor is held as float32.
    public static func compute(config: ModelConfig, names: [String], shape: (String) -> [Int],
                               values: (String, (UnsafeBufferPointer<Float>) -> Void) -> Void) -> String {
        var hasher = SHA256()
        var header = ByteSink()
        func string(_ s: String) {
            header.append(UInt64(s.utf8.count))
            header.append(bytes: s.utf8)
        }
        func int(_ v: Int) { header.append(UInt64(v)) }
        func real(_ v: Double?) { header.append(Float(v ?? 0).bitPattern) }
        string(encodingVersion)
        for v in [config.hiddenSize, config.intermediateSize, config.numLayers, config.numHeads, config.numKVHeads,
                  config.headDim, config.vocabSize] { int(v) }
        real(config.ropeTheta)
        real(config.rmsNormEps)
        int(config.tieWordEmbeddings ? 1 : 0)
        int(config.attentionBias ? 1 : 0)
        let scaling = config.ropeScaling
        string(scaling?.kind.rawValue ?? "none")
        real(scaling?.factor)
        real(scaling?.lowFrequencyFactor)
        real(scaling?.highFrequencyFactor)
        int(scaling?.originalMaxPositionEmbeddings ?? 0)
        int(names.count)
        hasher.update(data: header.bytes)

        for name in names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            let dims = shape(name)
            header = ByteSink()
            string(name)
            int(dims.count)
            for d in dims { int(d) }
            hasher.update(data: header.bytes)
            values(name) { piece in
                #if _endian(little)
                hasher.update(bufferPointer: UnsafeRawBufferPointer(piece))
                #else
                var le = ByteSink()
                for v in piece { le.append(v) }
                hasher.update(data: le.bytes)
                #endif
            }
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}
