import HeraldCore
import HeraldStorage

/// Records, reads and deletes staged media: the rules between the media routes, the staging area and storage.
struct MediaService {
    let media: any MediaRepository
    /// Where uploads' bytes are staged (the routes stream bodies into it).
    let staging: StagingArea

    /// Records a medium whose bytes are staged; on failure its staged file goes too. The medium as recorded.
    func record(_ id: MediaID, type: MediaType, staged: StagingArea.Staged, description: String?, tenant: Tenant) async throws -> Media {
        let medium = Media(
            id: id, contentType: type, size: Int64(staged.size), sha256: staged.sha256, description: description, createdAt: Timestamp.now())
        do {
            try await media.insert(medium, tenant: tenant, stagingPath: staged.relativePath)
            return medium
        } catch {
            await staging.remove(staged.relativePath)
            throw error
        }
    }

    func find(_ id: String, tenant: Tenant) async throws -> Media {
        guard let mediaID = MediaID(validating: id), let medium = try await media.find(id: mediaID, tenant: tenant) else {
            throw ServiceError.notFound(kind: "media", id: id)
        }
        return medium
    }

    /// Deletes a staged medium that no post holds, and its staged file.
    func delete(_ id: String, tenant: Tenant) async throws {
        guard let mediaID = MediaID(validating: id) else { throw ServiceError.notFound(kind: "media", id: id) }
        switch try await media.deleteStaged(id: mediaID, tenant: tenant) {
        case .deleted(let stagingPath):
            await staging.remove(stagingPath)
        case .notFound:
            throw ServiceError.notFound(kind: "media", id: id)
        case .attached(let postID):
            // The post is the caller's own: attached media belong to the tenant that attached them.
            throw ServiceError.conflict("media \(id) is attached to post \(postID)")
        }
    }
}
