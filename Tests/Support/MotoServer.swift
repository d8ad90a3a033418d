import Foundation
import Publishing

/// moto's S3 server on 127.0.0.1, verifying SigV4: one per test process, started on first use.
///
/// Needs `pip install "moto[server]"` (`.ci/run` installs it). The server runs `moto_server.py`, which
/// spends moto's four unauthenticated calls on an IAM user with an `s3:*` policy and prints its key:
/// from then on every request must carry a valid signature, so the tests check our signer against a
/// second implementation.
public struct MotoServer: Sendable {
    public let port: Int
    /// The IAM user's key: signatures made with it are accepted.
    public let credentials: SigV4Signer.Credentials

    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// The server of this test process, started by the first caller and shared by every test.
    public static func shared() async throws -> MotoServer {
        let handshake = try await script.handshake()
        return MotoServer(
            port: handshake.port, credentials: .init(accessKeyID: handshake.accessKeyID, secretAccessKey: handshake.secretAccessKey))
    }

    private struct Handshake: Decodable, Sendable {
        var port: Int
        var accessKeyID: String
        var secretAccessKey: String
    }

    /// Needs `pip install "moto[server]"`.
    private static let script = ScriptServer<Handshake>(script: "moto_server.py")
}
