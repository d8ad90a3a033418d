import Crypto
import Foundation

/// Standard Webhooks 1.0 signing: secrets `whsec_` + base64, signatures `v1,` + base64 HMAC-SHA256 of
/// `{webhook-id}.{webhook-timestamp}.{body}` keyed with the secret's decoded bytes.
enum WebhookSignature {
    /// What every secret starts with.
    static let secretPrefix = "whsec_"

    /// A new secret: 32 bytes from the system's secure random source.
    static func generateSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return secretPrefix + Data(bytes).base64EncodedString()
    }

    /// The `webhook-signature` header of one attempt; nil for a secret that is not `whsec_` + base64.
    static func sign(id: String, timestamp: Int, body: [UInt8], secret: String) -> String? {
        guard secret.hasPrefix(secretPrefix), let key = Data(base64Encoded: String(secret.dropFirst(secretPrefix.count))) else {
            return nil
        }
        var message = Array("\(id).\(timestamp).".utf8)
        message += body
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key))
        return "v1," + Data(mac).base64EncodedString()
    }
}
