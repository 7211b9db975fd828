// SeededRNG: a SplitMix64 generator whose whole state is one UInt64, so a checkpoint can save
// it and resume bit-exactly; plus uniform and normal Float helpers. Leaves out streams/jumps.
// Follows Steele, Lea & Flood, "Fast splittable pseudorandom number generators" (2014).
import Foundation

public struct SeededRNG: RandomNumberGenerator, Sendable, Codable, Equatable {
    /// The complete generator state; save and restore it for an exact resume.
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 24 random bits.
    public mutating func nextFloat() -> Float { Float(next() >> 40) * 0x1p-24 }

    /// Uniform in [0, 1) with 53 random bits.
    public mutating func nextDouble() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// Uniform in [low, high).
    public mutating func uniform(_ low: Float, _ high: Float) -> Float { low + (high - low) * nextFloat() }

    /// Normal(mean, std) by Box–Muller (one draw per call, computed in Double).
    public mutating func normal(mean: Float = 0, std: Float = 1) -> Float {
        let u1 = max(nextDouble(), 0x1p-53), u2 = nextDouble()
        let z = (-2 * Foundation.log(u1)).squareRoot() * Foundation.cos(2 * Double.pi * u2)
        return mean + std * Float(z)
    }

    /// `count` values uniform in [low, high).
    public mutating func uniformArray(count: Int, _ low: Float, _ high: Float) -> [Float] {
        (0..<count).map { _ in uniform(low, high) }
    }

    /// `count` values from Normal(mean, std).
    public mutating func normalArray(count: Int, mean: Float = 0, std: Float = 1) -> [Float] {
        (0..<count).map { _ in normal(mean: mean, std: std) }
    }
}
