import RISC
import Testing

@Suite("Release versions")
struct ReleaseTests {
    @Test("Later is by number, part by part, not by text")
    func ordering() {
        #expect(Release.isNewer("0.10.0", than: "0.9.9"))
        #expect(Release.isNewer("1.0.0", than: "0.99.99"))
        #expect(Release.isNewer("0.1.1", than: "0.1"))
        #expect(!Release.isNewer("0.1.0", than: "0.1.0"))
        #expect(!Release.isNewer("0.1", than: "0.1.0"))
        #expect(!Release.isNewer("0.9.9", than: "0.10.0"))
    }
}
