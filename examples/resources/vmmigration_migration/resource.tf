# Migrate one VM: power it off through VMware Tools (hard after 10 minutes),
# copy and verify its disks, import them through CDI's upload proxy, and
# start it on KubeVirt with its MAC addresses.
resource "vmmigration_migration" "web01" {
  source = {
    host    = "esxi-a"
    vm_name = "web-01"
  }

  destination = {
    namespace     = "apps"
    name          = "web-01"
    storage_class = "fast-rbd"
    run_strategy  = "Always"
    network_map = {
      "VM Network" = "pod"
      "DMZ"        = "apps/dmz-vlan"
    }
    labels = {
      "app.kubernetes.io/part-of" = "shop"
    }
  }

  power_off_policy = "graceful_then_hard"
  shutdown_timeout = "10m"
  target_format    = "raw"

  transport = {
    upload_proxy_url            = "https://cdi-uploadproxy.apps.example.com"
    upload_proxy_ca_certificate = file("cdi-uploadproxy-ca.crt")
  }

  validation = {
    guest_agent = true
    ip_reported = true
    timeout     = "15m"
  }

  retry = {
    attempts        = 5
    initial_backoff = "10s"
    max_backoff     = "5m"
  }

  # Destroying this resource keeps the migrated VM (the default).
  delete_policy = "keep"

  timeouts {
    create = "6h"
  }
}
