# Check a planned migration without touching anything, and stop the plan with
# the checks' own advice when a blocker fails.
data "vmmigration_preflight" "web01" {
  host             = "esxi-a"
  vm_name          = "web-01"
  namespace        = "apps"
  name             = "web-01"
  storage_class    = "fast-rbd"
  power_off_policy = "graceful_then_hard"
  network_map = {
    "VM Network" = "pod"
    "DMZ"        = "apps/dmz-vlan"
  }

  lifecycle {
    postcondition {
      condition     = self.passed
      error_message = join("\n", self.blockers)
    }
  }
}

output "web01_warnings" {
  value = data.vmmigration_preflight.web01.warnings
}
