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

# What was migrated earlier.
variable "migrated" {
  description = "VMs migrated earlier with this provider whose Terraform state is lost or kept elsewhere, by destination VM name, with the source VM's display name. Each is adopted from its migration record in the destination namespace."
  type = map(object({
    vm_name = string
  }))
  default = {
    "web-01" = { vm_name = "web-01" }
  }
}

variable "namespace" {
  description = "Destination namespace of the migrated VMs."
  type        = string
  default     = "apps"
}

variable "storage_class" {
  description = "StorageClass their DataVolumes were created with."
  type        = string
  default     = "standard"
}

variable "network_map" {
  description = "Network map they were migrated with."
  type        = map(string)
  default = {
    "VM Network" = "pod"
  }
}

variable "shutdown_timeout" {
  description = "shutdown_timeout they were migrated with."
  type        = string
  default     = "10m"
}

variable "conversion" {
  description = "The conversion the VMs were migrated with: \"virt-v2v\" (the default) or \"none\". It must match, or the plan would migrate them again."
  type        = string
  default     = "virt-v2v"
}
