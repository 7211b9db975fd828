// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF), the
// checksum of TFRecord framing, and TFRecord's mask of it (rotate right 15, add 0xA282EAD8) so
// that a CRC stored beside the bytes it covers is not itself a valid CRC of them. Table-driven, a
// byte at a time: event files are small. Check values: RFC 3720 (iSCSI) appendix B.4.
public enum CRC32C {
    static let table: [UInt32] = (0..<256).map { i in
        var c = UInt32(i)
        for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
        return c
    }

    /// The CRC-32C of `bytes`, continuing from `crc` (the CRC of the bytes before them; 0 to start).
    public static func checksum<Bytes: Sequence>(_ bytes: Bytes, continuing crc: UInt32 = 0) -> UInt32 where Bytes.Element == UInt8 {
        var c = ~crc
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return ~c
    }

    /// TFRecord's masked form of a CRC.
    public static func masked(_ crc: UInt32) -> UInt32 {
        ((crc >> 15) | (crc << 17)) &+ 0xA282_EAD8
    }
}
