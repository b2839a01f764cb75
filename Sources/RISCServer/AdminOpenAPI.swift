import Foundation
import RISC

/// The OpenAPI 3.1 document of the admin API: `Sources/RISCServer/Resources/admin-openapi.json`, compiled in.
public enum AdminOpenAPI {
    public static let document: JSONValue = {
        guard let document = try? JSONValue.parse(Data(PackageResources.admin_openapi_json)) else {
            preconditionFailure("Resources/admin-openapi.json is not valid JSON")
        }
        return document
    }()
}
