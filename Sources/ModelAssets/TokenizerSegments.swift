// Tokenizing rendered chat segments for training: the ids of the joined text (exactly what the model
// sees at inference) plus a per-token target flag, so loss masks need no per-segment tokenization
// (which differs where a word crosses a segment boundary; see ChatTemplateTests). Not here: padding,
// truncation, packing (DataSchema). The token-to-byte mapping follows HF's encoding offsets.
import Foundation

extension BPETokenizer {
    /// The ids of the joined segment text (`encode(joined)`), each marked a target when any of its
    /// bytes comes from a target segment. For NFC tokenizers (Qwen2) each segment is normalized on
    /// its own, which differs from normalizing the joined text only if a segment starts with a
    /// combining mark.
    public func encode(segments: [TemplateSegment]) -> (ids: [Int], isTarget: [Bool]) {
        let texts = segments.map { normalizesNFC ? $0.text.precomposedStringWithCanonicalMapping : $0.text }
        // Byte offset where each segment ends, and the joined scalars with each one's byte offset.
        var ends: [Int] = []
        var scalars: [Unicode.Scalar] = []
        var offsets: [Int] = []
        var bytes = 0
        for text in texts {
            for s in text.unicodeScalars {
                scalars.append(s)
                offsets.append(bytes)
                bytes += UTF8.width(s)
            }
            ends.append(bytes)
        }
        offsets.append(bytes)
        // Prefix count of target bytes, to ask "any target byte in [a, b)" in O(1).
        var targetBefore = [Int](repeating: 0, count: bytes + 1)
        var start = 0
        for (k, end) in ends.enumerated() {
            for b in start..<end { targetBefore[b + 1] = targetBefore[b] + (segments[k].isTarget ? 1 : 0) }
            start = end
        }

        var ids: [Int] = []
        var marks: [Bool] = []
        var wordIds: [Int] = []
        func anyTarget(_ from: Int, _ to: Int) -> Bool { targetBefore[to] > targetBefore[from] }
        func emit(_ tokenIds: [Int], fromByte: Int, toByte: Int) {
            // Tokens cover the word's bytes in order, unless unencodable bytes were dropped: then
            // each token is judged by the whole word.
            let exact = tokenIds.reduce(0) { $0 + tokenBytes[$1].count } == toByte - fromByte
            var at = fromByte
            for id in tokenIds {
                ids.append(id)
                if exact {
                    let end = at + tokenBytes[id].count
                    marks.append(anyTarget(at, end))
                    at = end
                } else {
                    marks.append(anyTarget(fromByte, toByte))
                }
            }
        }
        let classes = ScalarClass.classify(scalars)
        var word: [UInt8] = []
        func ordinary(_ range: Range<Int>) {
            if let sp = sentencePiece { return sentencePieceOrdinary(range, sp) }
            preTokenizer.forEachWord(scalars: scalars, classes: classes, in: range) { w in
                word.removeAll(keepingCapacity: true)
                for i in w { appendUTF8Bytes(scalars[i], to: &word) }
                wordIds.removeAll(keepingCapacity: true)
                encodeWord(word, into: &wordIds)
                emit(wordIds, fromByte: offsets[w.lowerBound], toByte: offsets[w.upperBound])
            }
        }
        // SentencePiece: tokens cover the "▁"-spelled text; map each back to the original bytes of the
        // scalars it touches (an inserted prefix "▁" covers none, and is judged by the next byte).
        func sentencePieceOrdinary(_ range: Range<Int>, _ sp: SentencePieceOptions) {
            let text = metaspaceText(scalars[range], atTextStart: range.lowerBound == 0, options: sp)
            func origStart(_ k: Int) -> Int { text.origin[k].map { offsets[$0] } ?? offsets[range.lowerBound] }
            func origEnd(_ k: Int) -> Int { text.origin[k].map { offsets[$0 + 1] } ?? offsets[range.lowerBound] }
            forEachMetaspaceWord(text, options: sp) { w in
                wordIds.removeAll(keepingCapacity: true)
                encodeSentencePieceWord(text.scalars[w], options: sp, into: &wordIds)
                let spelled = wordIds.map { id -> Int in
                    let b = tokenBytes[id]
                    return b.count == 1 && byteTokens[Int(b.first!)] == Int32(id) ? 1 : (tokens[id]?.utf8.count ?? 0)
                }
                let wordBytes = text.scalars[w].reduce(0) { $0 + UTF8.width($1) }
                let from = origStart(w.lowerBound), to = origEnd(w.upperBound - 1)
                guard spelled.reduce(0, +) == wordBytes else {  // an unknown token hides how much it covers
                    for id in wordIds {
                        ids.append(id)
                        marks.append(anyTarget(from, max(to, min(from + 1, bytes))))
                    }
                    return
                }
                var k = w.lowerBound, into = 0  // the scalar the next token starts in, and bytes of it used
                for (id, length) in zip(wordIds, spelled) {
                    let first = k
                    var left = length
                    while left > 0 {
                        let take = min(left, UTF8.width(text.scalars[k]) - into)
                        left -= take
                        into += take
                        if into == UTF8.width(text.scalars[k]) && left > 0 { k += 1; into = 0 }
                    }
                    let last = k
                    if into == UTF8.width(text.scalars[k]) { k += 1; into = 0 }
                    let a = origStart(first), b = origEnd(last)
                    ids.append(id)
                    marks.append(anyTarget(a, max(b, min(a + 1, bytes))))
                }
            }
        }
        var next = 0
        specials.forEachMatch(in: scalars) { range, id in
            if range.lowerBound > next { ordinary(next..<range.lowerBound) }
            emit([id], fromByte: offsets[range.lowerBound], toByte: offsets[range.upperBound])
            next = range.upperBound
        }
        if next < scalars.count { ordinary(next..<scalars.count) }
        return (ids, marks)
    }
}
