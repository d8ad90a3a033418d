/// One line of a progress display, fitted to the terminal's width: `name [=====     ]  45%  5.6/12.3 MiB  3.2 MiB/s  0:02 left`.
///
/// What does not fit goes, least useful first: the time left, then the rate, then the byte counts; the bar shrinks to
/// 10 cells and the name is cut (with `…`) before the percentage would go.
public struct ProgressLine: Sendable, Equatable {
    /// The parts of a line, each drawn in its own colour by the terminal display.
    public struct Parts: Sendable, Equatable {
        public var name: String
        public var bar: String
        public var status: String
        public var figures: String
    }

    public var name: String
    public var fraction: Double
    /// Bytes done and in all; nil to leave the counts out.
    public var bytes: (done: Int, total: Int)?
    public var bytesPerSecond: Double?
    public var secondsLeft: Int?
    /// A word in place of the percentage once the transfer has an outcome (`done`, `failed`, `cancelled`).
    public var outcome: String?
    /// The columns the name takes (padded or cut), so that the bars of several lines align; its own length when nil.
    public var nameWidth: Int?

    public init(
        name: String, fraction: Double, bytes: (done: Int, total: Int)? = nil, bytesPerSecond: Double? = nil, secondsLeft: Int? = nil,
        outcome: String? = nil
    ) {
        self.name = name
        self.fraction = fraction
        self.bytes = bytes
        self.bytesPerSecond = bytesPerSecond
        self.secondsLeft = secondsLeft
        self.outcome = outcome
    }

    public static func == (a: ProgressLine, b: ProgressLine) -> Bool {
        a.name == b.name && a.fraction == b.fraction && a.bytes?.done == b.bytes?.done && a.bytes?.total == b.bytes?.total
            && a.bytesPerSecond == b.bytesPerSecond && a.secondsLeft == b.secondsLeft && a.outcome == b.outcome && a.nameWidth == b.nameWidth
    }

    /// The line's parts for a terminal `width` columns wide; joined, they never take more than `width - 1` columns
    /// (a line as wide as the terminal would wrap on some terminals).
    public func parts(width: Int) -> Parts {
        let room = max(width - 1, 20)
        let fraction = min(max(self.fraction, 0), 1)
        let status = outcome ?? "\(Int(fraction * 100))%".leftPadded(to: 4)
        var figures: [String] = []
        if let bytes {
            figures.append(
                bytes.done >= bytes.total
                    ? HumanReadable.bytes(bytes.total) : "\(HumanReadable.bytes(bytes.done)) of \(HumanReadable.bytes(bytes.total))")
        }
        if outcome == nil {
            if let bytesPerSecond { figures.append(HumanReadable.rate(bytesPerSecond)) }
            if let secondsLeft { figures.append("\(HumanReadable.duration(seconds: secondsLeft)) left") }
        }
        let nameWidth = min(max(self.nameWidth ?? name.count, 8), 24)
        // name, space, [bar], space, status, then "  figures".
        func length(bar: Int, figures: [String]) -> Int {
            nameWidth + 1 + bar + 2 + 1 + status.count + (figures.isEmpty ? 0 : 2 + figures.joined(separator: "  ").count)
        }
        var barWidth = 30
        while length(bar: barWidth, figures: figures) > room, barWidth > 10 { barWidth -= 1 }
        while length(bar: barWidth, figures: figures) > room, !figures.isEmpty { figures.removeLast() }
        barWidth = max(10, min(30, barWidth + room - length(bar: barWidth, figures: figures)))
        var name = self.name
        let spare = room - length(bar: barWidth, figures: figures)
        let fittedName = nameWidth + min(spare, 0)
        if name.count > fittedName { name = String(name.prefix(max(fittedName - 1, 1))) + "…" }
        name = name.padding(to: max(fittedName, 2))
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = "[" + String(repeating: "=", count: filled) + String(repeating: " ", count: barWidth - filled) + "]"
        return Parts(name: name, bar: bar, status: status, figures: figures.joined(separator: "  "))
    }

    /// The whole line for a terminal `width` columns wide, without colour.
    public func text(width: Int) -> String {
        let parts = parts(width: width)
        return "\(parts.name) \(parts.bar) \(parts.status)" + (parts.figures.isEmpty ? "" : "  \(parts.figures)")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
    fileprivate func padding(to width: Int) -> String { self + String(repeating: " ", count: max(0, width - count)) }
}
