# Where the source VM lives: one ESXi host reached over SSH.
variable "esxi_address" {
  description = "Host name or IP address of the ESXi host's SSH service."
  type        = string
}

variable "esxi_port" {
  description = "SSH port of the ESXi host."
  type        = number
  default     = 22
}

variable "esxi_user" {
  description = "Account used on the ESXi host."
  type        = string
  default     = "root"
}

variable "esxi_fingerprint" {
  description = "Pinned SHA256 fingerprint of the host key: run `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host."
  type        = string
}

variable "esxi_password" {
  description = "Password of esxi_user. Leave it unset to use $VMMIGRATION_ESXI_PASSWORD."
  type        = string
  sensitive   = true
  default     = null
}

# Where it goes: a Kubernetes cluster running KubeVirt and CDI.
variable "kubeconfig" {
  description = "Path to the kubeconfig of the destination cluster."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_context" {
  description = "Context of the kubeconfig to use; null uses its current context."
  type        = string
  default     = null
}

variable "upload_proxy_url" {
  description = "URL of CDI's upload proxy, reachable from the machine running Terraform."
  type        = string
}

variable "upload_proxy_ca_certificate" {
  description = "PEM CA certificate of the upload proxy (for example TF_VAR_upload_proxy_ca_certificate=\"$(cat cdi-uploadproxy-ca.crt)\"); null uses the system's roots."
  type        = string
  default     = null
}

variable "upload_proxy_server_name" {
  description = "Name to check the upload proxy's certificate against when the URL's host is not in it (a port-forward, a NodePort, an IP), e.g. cdi-uploadproxy.cdi.svc; null checks the URL's host."
  type        = string
  default     = null
}

variable "work_dir" {
  description = "Local staging directory with room for the VM's disks; null uses $VMMIGRATION_WORK_DIR or the user cache directory."
  type        = string
  default     = null
}

# What to migrate: the list a pull request changes. Keep it in a reviewed
# file such as migrations.auto.tfvars (see README.md).
variable "migrations" {
  description = "VMs to migrate, by destination VM name: the source VM's display name and, optionally, a run strategy and labels. Adding an entry migrates that VM on merge; removing one forgets the migration and keeps the VM (delete_policy keep)."
  type = map(object({
    vm_name      = string
    run_strategy = optional(string, "Always")
    labels       = optional(map(string), {})
  }))
  default = {}
}

variable "namespace" {
  description = "Destination namespace of the VirtualMachines, their DataVolumes and the migration records."
  type        = string
  default     = "apps"
}

variable "storage_class" {
  description = "StorageClass of the DataVolumes."
  type        = string
  default     = "standard"
}

variable "network_map" {
  description = "Destination of each source port group: \"pod\" or a Multus network \"<namespace>/<name>\"."
  type        = map(string)
  default = {
    "VM Network" = "pod"
  }
}

variable "max_concurrent_migrations" {
  description = "Most migrations reading from the host at once."
  type        = number
  default     = 2
}

variable "shutdown_timeout" {
  description = "How long each guest may take to shut down through VMware Tools before it is powered off hard."
  type        = string
  default     = "10m"
}

variable "conversion" {
  description = "How guests are made to boot on KubeVirt: \"virt-v2v\" (installs the virtio drivers) or \"none\" for guests that already have them."
  type        = string
  default     = "virt-v2v"
}
