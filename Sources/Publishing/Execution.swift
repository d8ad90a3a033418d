import HeraldCore
import HeraldStorage
import Logging
import Metrics
import Platform
import Synchronization
import Tracing

/// One job's run: the parent task that uploads every medium through a bounded task group, then commits or undoes.
struct Execution: Sendable {
    let job: ClaimedJob
    let control: WorkControl
    let jobs: any JobRepository
    let store: any MediaStore
    /// The durable clean-up, whose DELETE of a key an upload of it waits for; nil where none runs (some tests).
    let cleaner: ObjectCleaner?
    let configuration: RunnerConfiguration
    let logger: Logger

    enum Outcome: String, Sendable {
        case succeeded, failed, cancelled, requeued, lostLease = "lost_lease", error
    }

    /// An upload that failed for good.
    struct UploadFailure: Error {
        let mediaID: MediaID
        let code: JobErrorCode
        let message: String
    }

    /// Runs the job to one of its ends. The upload work is cancelled when the control stops it (the ``WorkLoop`` does).
    func run() async -> Outcome {
        let result = await Result { try await self.uploadAll() }
        // The final writes must happen even though this task may be cancelled: they run in a task of their own.
        return await Task { await self.conclude(result) }.value
    }

    /// Uploads every medium, at most `uploadConcurrency` at once: the next starts as one finishes.
    private func uploadAll() async throws -> [MediaID: StoredObject] {
        try await withThrowingTaskGroup(of: (MediaID, StoredObject).self) { group in
            var pending = job.media.makeIterator()
            for _ in 0..<max(1, configuration.uploadConcurrency) {
                guard let media = pending.next() else { break }
                group.addTask { try await self.upload(media) }
            }
            var objects: [MediaID: StoredObject] = [:]
            // A failure for good leaves this loop by throwing, which cancels the other uploads.
            while let (mediaID, object) = try await group.next() {
                objects[mediaID] = object
                if let media = pending.next() { group.addTask { try await self.upload(media) } }
            }
            return objects
        }
    }

    /// One medium: retried with exponential backoff and jitter while the error is transient.
    private func upload(_ media: ClaimedMedia) async throws -> (MediaID, StoredObject) {
        let object = MediaObject(
            key: MediaObject.key(mediaID: media.mediaID.rawValue, fileExtension: media.contentType.fileExtension),
            stagedFile: stagedFile(media),
            size: media.size,
            sha256: media.sha256,
            contentType: media.contentType.rawValue
        )
        var attempts = media.attempts
        var tries = 0
        // A re-published post's objects may be being deleted (the clean-up of its previous job): after that DELETE.
        await cleaner?.settled(key: object.key)
        while true {
            try Task.checkCancellation()
            attempts += 1
            tries += 1
            jobs.updateUpload(jobID: job.jobID, mediaID: media.mediaID, state: .uploading, attempts: attempts, error: nil)
            let started = ContinuousClock.now
            let span = configuration.tracer.map { Self.startSpan(of: media, attempt: attempts, tracer: $0) }
            var spanOpen = span != nil
            /// Ends the attempt's span with what it came to (before a retry's wait, which is no part of it).
            func endSpan(_ outcome: String, error: (any Error)? = nil) {
                guard spanOpen, let span else { return }
                spanOpen = false
                span.attributes["herald.upload.outcome"] = outcome
                if let error { span.recordError(error) }
                if outcome != "uploaded" { span.setStatus(SpanStatus(code: .error)) }
                span.end()
            }
            // Left any other way (the job's cancel, a shutdown): cancelled.
            defer { endSpan("cancelled") }
            do {
                let put = try await withTimeout(configuration.uploadTimeout) { [jobs, jobID = job.jobID, staging = configuration.staging] in
                    let progress: BytesTaken = { bytes in jobs.reportBytes(jobID: jobID, mediaID: media.mediaID, bytes: bytes) }
                    // The store's requests are the attempt's children.
                    return try await ServiceContext.withValue(span?.context ?? ServiceContext.current) {
                        switch staging {
                        case .directory: try await store.put(object, progress: progress)
                        case .store: try await store.copy(object, fromStaged: media.stagingPath, progress: progress)
                        }
                    }
                }
                guard let url = put else { throw MediaStoreError.timedOut(after: configuration.uploadTimeout) }
                endSpan("uploaded")
                Timer(label: "herald_upload_duration_seconds").record(duration: ContinuousClock.now - started)
                Counter(label: "herald_uploads_total", dimensions: [("outcome", "uploaded")]).increment()
                jobs.updateUpload(jobID: job.jobID, mediaID: media.mediaID, state: .uploaded, attempts: attempts, error: nil)
                return (media.mediaID, StoredObject(key: object.key, url: url))
            } catch let error as MediaStoreError where error.isTransient && tries < configuration.uploadAttempts {
                endSpan("retried", error: error)
                Counter(label: "herald_uploads_total", dimensions: [("outcome", "retried")]).increment()
                logger.notice(
                    "upload failed, will retry",
                    metadata: ["job_id": "\(job.jobID)", "media_id": "\(media.mediaID)", "attempt": "\(attempts)", "error": "\(error)"]
                )
                jobs.updateUpload(jobID: job.jobID, mediaID: media.mediaID, state: .pending, attempts: attempts, error: error.message)
                try await Task.sleep(for: configuration.uploadRetry.delay(after: tries))
            } catch let error as MediaStoreError {
                endSpan("failed", error: error)
                Counter(label: "herald_uploads_total", dimensions: [("outcome", "failed")]).increment()
                let code: JobErrorCode = error.errorCode == .stagedFileMissing ? .mediaMissing : .uploadFailed
                jobs.updateUpload(jobID: job.jobID, mediaID: media.mediaID, state: .failed, attempts: attempts, error: error.message)
                throw UploadFailure(mediaID: media.mediaID, code: code, message: error.message)
            }
        }
    }

    /// The span of one upload attempt, a child of the job's run.
    private static func startSpan(of media: ClaimedMedia, attempt: Int, tracer: any Tracer) -> any Span {
        let span = tracer.startSpan("upload", context: ServiceContext.current ?? .topLevel, ofKind: .internal)
        span.attributes["herald.media.id"] = media.mediaID.rawValue
        span.attributes["herald.media.bytes"] = Int(media.size)
        span.attributes["herald.upload.attempt"] = attempt
        return span
    }

    /// Writes the job's end: committed, failed (objects deleted), cancelled (objects deleted) or re-queued.
    private func conclude(_ result: Result<[MediaID: StoredObject], any Error>) async -> Outcome {
        do {
            switch (result, control.stopReason) {
            case (_, .lostLease?):
                logger.warning("job lease lost: another runner owns it now", metadata: ["job_id": "\(job.jobID)"])
                return .lostLease
            case (_, .shutdown?):
                try await jobs.requeue(job.lease)
                return .requeued
            case (_, .stopRequested?):
                return try await cancelled()
            case (.success(let objects), nil):
                switch try await jobs.commit(job.lease, objects: objects, now: .now()) {
                case .done:
                    await removeStaged()
                    return .succeeded
                case .lostLease: return .lostLease
                case .cancelRequested: return try await cancelled()  // the cancel came first: nothing was committed
                }
            case (.failure(let failure as UploadFailure), nil):
                await deleteObjects()
                let error = Job.Failure(code: failure.code, message: failure.message, mediaID: failure.mediaID)
                return try await jobs.fail(job.lease, error: error, now: .now()) == .lostLease ? .lostLease : .failed
            case (.failure(is CancellationError), nil):
                // The runner itself was cancelled (a hard stop): the job runs again on the next start.
                try await jobs.requeue(job.lease)
                return .requeued
            case (.failure(let error), nil):
                await deleteObjects()
                let failure = Job.Failure(code: .internal, message: "\(error)", mediaID: nil)
                return try await jobs.fail(job.lease, error: failure, now: .now()) == .lostLease ? .lostLease : .failed
            }
        } catch {
            // The lease runs out and the job is reclaimed: nothing is lost, it runs again.
            logger.error("could not record the job's end", metadata: ["job_id": "\(job.jobID)", "error": "\(error)"])
            return .error
        }
    }

    private func cancelled() async throws -> Outcome {
        await deleteObjects()
        let outcome = try await jobs.finishCancelled(job.lease, now: .now())
        if let requested = control.stopTime {
            Timer(label: "herald_cancel_latency_seconds").record(duration: ContinuousClock.now - requested)
        }
        return outcome == .lostLease ? .lostLease : .cancelled
    }

    /// The staged file of `media` when staged bytes are files (the store's own staged key is the row's path).
    private func stagedFile(_ media: ClaimedMedia) -> String {
        guard case .directory(let directory) = configuration.staging else { return media.stagingPath }
        return directory + "/" + media.stagingPath
    }

    /// Removes the published post's staged bytes, after its commit: a crash before this leaves files the sweep removes,
    /// never a row without its file. (A failed or cancelled post keeps them: it may be published again.)
    private func removeStaged() async {
        switch configuration.staging {
        case .directory(let directory):
            for media in job.media {
                let path = directory + "/" + media.stagingPath
                if unlink(path) != 0, errno != ENOENT {
                    logger.warning("could not remove a published medium's staged file", metadata: ["path": "\(path)", "errno": "\(errno)"])
                }
            }
        case .store:
            let keys = job.media.map(\.stagingPath)
            do {
                try await store.delete(keys: keys)
            } catch {
                logger.warning("could not remove a published medium's staged objects", metadata: ["keys": "\(keys)", "error": "\(error)"])
            }
        }
    }

    /// Deletes every object this job may have stored (keys are deterministic; a missing one is fine).
    private func deleteObjects() async {
        for media in job.media {
            let key = MediaObject.key(mediaID: media.mediaID.rawValue, fileExtension: media.contentType.fileExtension)
            do {
                try await store.delete(key: key)
            } catch {
                logger.warning("could not delete an uploaded object", metadata: ["key": "\(key)", "error": "\(error)"])
            }
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
