"""Preview links: signed, expiring URLs to a loopback port inside a sandbox, via pods/exec."""
