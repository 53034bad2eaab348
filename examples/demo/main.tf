# The demo wave: every VM on the simulated host is checked, and every VM
# whose pre-flight checks pass is migrated, at most two at a time from the
# host. `make demo` fills in the variables.
terraform {
  required_providers {
    vmmigration = { source = "vmmigration/vmmigration" }
  }
}

variable "esxi_address" { type = string }
variable "esxi_port" { type = number }
variable "esxi_fingerprint" { type = string }
variable "kubeconfig" { type = string }
variable "kube_context" { type = string }
variable "work_dir" { type = string }
variable "upload_proxy_url" { type = string }
variable "upload_proxy_ca" { type = string }
variable "upload_proxy_server_name" { type = string }
variable "worker_image" { type = string }
variable "cluster_execution" {
  description = "VMs whose disks Kubernetes Jobs copy straight into their claims (execution \"cluster\"); the others are copied on this machine."
  type        = set(string)
  default     = []
}
variable "esxi_password" {
  type      = string
  sensitive = true
}

provider "vmmigration" {
  work_dir     = var.work_dir
  worker_image = var.worker_image

  esxi_host {
    name                      = "esxi-demo"
    address                   = var.esxi_address
    port                      = var.esxi_port
    password                  = var.esxi_password
    host_key_fingerprint      = var.esxi_fingerprint
    max_concurrent_migrations = 2
  }

  kubernetes {
    config_path    = var.kubeconfig
    config_context = var.kube_context
  }
}

data "vmmigration_esxi_vms" "wave" {
  host = "esxi-demo"
}

locals {
  # System VMs (the host's vCLS VM) are never migrated, and a VM hostd
  # skips as invalid has no files and no name to migrate it under.
  vms = { for vm in data.vmmigration_esxi_vms.wave.vms : vm.name => vm if !vm.system && vm.name != "" }
  # Front-end networks go to the pod network; the backup network is a
  # Multus network in the destination namespace.
  network_map = {
    "VM Network" = "pod"
    "LAN"        = "pod"
    "Backup"     = "migrated/backup"
  }
  # debian-web is a real Debian 12 guest installed the VMware way: virt-v2v
  # converts it so that it boots on virtio. The other demo VMs' disks hold
  # generated data, not an operating system: they are imported as they are.
  conversion = { for name, vm in local.vms : name => name == "debian-web" ? "virt-v2v" : "none" }
  # Where each VM's disk work runs. In cluster execution the disks go
  # straight into claims of a class the cluster provisions for pods.
  execution     = { for name, vm in local.vms : name => contains(var.cluster_execution, name) ? "cluster" : "local" }
  storage_class = { for name, vm in local.vms : name => local.execution[name] == "cluster" ? "claims" : "standard" }
}

data "vmmigration_preflight" "wave" {
  for_each = local.vms

  host             = "esxi-demo"
  vmid             = each.value.vmid
  namespace        = "migrated"
  name             = each.key
  storage_class    = local.storage_class[each.key]
  power_off_policy = "graceful_then_hard"
  network_map      = local.network_map
  conversion       = local.conversion[each.key]
  execution        = local.execution[each.key]
}

resource "vmmigration_migration" "wave" {
  for_each = { for name, p in data.vmmigration_preflight.wave : name => local.vms[name] if p.passed }

  source = {
    host = "esxi-demo"
    vmid = each.value.vmid
  }
  destination = {
    namespace     = "migrated"
    name          = each.key
    storage_class = local.storage_class[each.key]
    network_map   = local.network_map
  }
  power_off_policy = "graceful_then_hard"
  shutdown_timeout = "30s"
  conversion       = local.conversion[each.key]
  execution        = local.execution[each.key]
  # The real guest's VMI runs once QEMU starts it, which on this machine
  # waits for a free guest slot and, without KVM, for cores a busy machine
  # shares: an hour for it rather than the default ten minutes. Validation
  # still stops a guest that is stuck rather than slow, by the boot-failure
  # lines on its serial console.
  start_timeout = local.conversion[each.key] == "virt-v2v" ? "1h" : null
  transport = {
    upload_proxy_url            = var.upload_proxy_url
    upload_proxy_ca_certificate = var.upload_proxy_ca
    upload_proxy_server_name    = var.upload_proxy_server_name
  }
  validation = {
    guest_agent = true
    ip_reported = true
  }
}

output "skipped" {
  description = "VMs the pre-flight checks refused, with the reason."
  value       = { for name, p in data.vmmigration_preflight.wave : name => p.blockers if !p.passed }
}

output "migrated" {
  value = {
    for name, m in vmmigration_migration.wave : name => {
      phase       = m.phase
      power_off   = m.power_off_action
      vm_uid      = m.vm_uid
      guest_os    = m.guest_os
      downtime    = m.downtime
      data_volume = [for d in m.disks : d.data_volume]
      execution   = m.execution
      copy_jobs   = [for d in m.disks : d.copy_job if d.copy_job != ""]
    }
  }
}
