public import HeraldCore

/// A `jobs` column of the job object: where it is in the statements that select ``all``. The same on every backend.
///
/// Derived from ``Job/Member``, the one list of the job object's members: the columns follow the members' order, and a
/// member added to a job must be given its columns here (the switch is exhaustive) before anything compiles.
public struct JobColumn: Sendable {
    /// Its index in ``all`` and so in the status statement's result (a position alone: the poll reads by it, and a
    /// trivial value costs no reference counting there).
    public let position: Int32

    /// The column's name in `jobs`.
    public var name: String { Self.all[Int(position)] }

    /// The columns a member is stored in, in order.
    public static func names(of member: Job.Member) -> [String] {
        switch member {
        case .id, .postID, .state, .priority, .attempt, .runAt, .cancelRequested, .createdAt, .startedAt, .finishedAt: [member.rawValue]
        // The lease's holder: set exactly while the job runs.
        case .runner: ["locked_by"]
        case .error: ["error_code", "error_message", "error_media_id"]
        // Derived from the state and the uploads.
        case .done, .progress: []
        // Rows of `uploads`, read beside the job.
        case .uploads: []
        }
    }

    /// Every column of the job object, in member order: the list the status statement selects.
    public static let all: [String] = Job.Member.allCases.flatMap(names(of:))

    /// The `part`th column of `member`.
    private init(_ member: Job.Member, part: Int = 0) {
        let before = Job.Member.allCases.prefix { $0 != member }.reduce(0) { $0 + Self.names(of: $1).count }
        precondition(part < Self.names(of: member).count, "\(member) has no column \(part)")
        position = Int32(before + part)
    }

    public static let id = JobColumn(.id)
    public static let postID = JobColumn(.postID)
    public static let state = JobColumn(.state)
    public static let priority = JobColumn(.priority)
    public static let attempt = JobColumn(.attempt)
    public static let runAt = JobColumn(.runAt)
    public static let cancelRequested = JobColumn(.cancelRequested)
    public static let errorCode = JobColumn(.error, part: 0)
    public static let errorMessage = JobColumn(.error, part: 1)
    public static let errorMediaID = JobColumn(.error, part: 2)
    public static let createdAt = JobColumn(.createdAt)
    public static let startedAt = JobColumn(.startedAt)
    public static let finishedAt = JobColumn(.finishedAt)
    public static let runner = JobColumn(.runner)
}

/// A `jobs` row as ``HeraldCore/Job/init(columns:uploads:)`` reads it, in whatever way a backend reads rows; NULL
/// reads as nil.
public protocol JobColumns {
    func text(_ column: JobColumn) -> String?
    func int(_ column: JobColumn) -> Int?
    func flag(_ column: JobColumn) -> Bool?
    /// Absent (NULL), present, or present but not a timestamp (`isReadable` false).
    func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool)
}

extension Job {
    /// The API object of a `jobs` row with its uploads, nil if a value is unreadable: the one mapping of every
    /// backend and every way it reads a row.
    public init?(columns row: some JobColumns, uploads: [Job.Upload]) {
        guard let id = row.text(.id).map(JobID.init(rawValue:)),
            let postID = row.text(.postID).map(PostID.init(rawValue:)),
            let state = row.text(.state).flatMap(JobState.init(rawValue:)),
            let priority = row.int(.priority).flatMap(Priority.init(rank:)),
            let attempt = row.int(.attempt),
            let cancelRequested = row.flag(.cancelRequested),
            let runAt = row.timestamp(.runAt).value,
            let createdAt = row.timestamp(.createdAt).value
        else { return nil }
        let startedAt = row.timestamp(.startedAt)
        let finishedAt = row.timestamp(.finishedAt)
        guard startedAt.isReadable, finishedAt.isReadable else { return nil }
        var failure: Job.Failure?
        if let code = row.text(.errorCode) {
            guard let code = JobErrorCode(rawValue: code) else { return nil }
            failure = Job.Failure(code: code, message: row.text(.errorMessage) ?? "", mediaID: row.text(.errorMediaID).map(MediaID.init(rawValue:)))
        }
        self.init(
            id: id,
            postID: postID,
            state: state,
            priority: priority,
            attempt: attempt,
            runAt: runAt,
            cancelRequested: cancelRequested,
            uploads: uploads,
            error: failure,
            createdAt: createdAt,
            startedAt: startedAt.value,
            finishedAt: finishedAt.value,
            runner: row.text(.runner)
        )
    }
}
