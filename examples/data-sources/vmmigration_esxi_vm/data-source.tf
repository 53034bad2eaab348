# One VM by name. When two VMs share a display name, use vmid instead.
data "vmmigration_esxi_vm" "db" {
  host = "esxi-a"
  name = "db-01"
}

output "db_disks" {
  value = [for d in data.vmmigration_esxi_vm.db.disks : "${d.device}: ${d.capacity_bytes} bytes (${d.thin ? "thin" : "thick"})"]
}
