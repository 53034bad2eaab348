# Every powered-on VM of a wave on host esxi-a whose name starts with "web-".
data "vmmigration_esxi_vms" "wave1" {
  host        = "esxi-a"
  name_regex  = "^web-"
  power_state = "poweredOn"
}

output "wave1" {
  value = {
    for vm in data.vmmigration_esxi_vms.wave1.vms : vm.name => {
      vmid     = vm.vmid
      disks_gb = [for d in vm.disks : d.capacity_bytes / 1073741824]
      networks = distinct([for n in vm.nics : n.network_name])
    }
  }
}
