// GPT-2's byte-to-unicode alphabet: byte-level BPE vocabularies spell every byte 0...255 as one
// printable Unicode scalar (space is "Ġ", newline "Ċ"). Only the table and its inverse live here;
// merging is in Tokenizer.swift. Reference: openai/gpt-2 src/encoder.py `bytes_to_unicode`.

enum ByteLevelAlphabet {
    /// The scalar value that spells each byte.
    static let byteToScalar: [UInt32] = {
        var table = [UInt32](repeating: 0, count: 256)
        var extra: UInt32 = 0
        for b in 0..<256 {
            let printable = (0x21...0x7E).contains(b) || (0xA1...0xAC).contains(b) || (0xAE...0xFF).contains(b)
            if printable {
                table[b] = UInt32(b)
            } else {
                table[b] = 256 + extra
                extra += 1
            }
        }
        return table
    }()

    /// The byte each alphabet scalar stands for; -1 for scalars outside the alphabet (0..<324).
    static let scalarToByte: [Int16] = {
        var table = [Int16](repeating: -1, count: 324)
        for (b, s) in byteToScalar.enumerated() { table[Int(s)] = Int16(b) }
        return table
    }()

    /// The alphabet spelling of `bytes` (what vocabularies and merges are written in).
    static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        var view = String.UnicodeScalarView()
        for b in bytes { view.append(Unicode.Scalar(byteToScalar[Int(b)])!) }
        return String(view)
    }

    /// The bytes a token spelled in the alphabet stands for; nil if it has a scalar outside it.
    static func decode(_ token: String) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(token.unicodeScalars.count)
        for s in token.unicodeScalars {
            guard s.value < 324 else { return nil }
            let b = scalarToByte[Int(s.value)]
            guard b >= 0 else { return nil }
            out.append(UInt8(b))
        }
        return out
    }
}
