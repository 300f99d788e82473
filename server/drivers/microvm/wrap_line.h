// The line cabin-vmm-wrap prints on QEMU's console when QEMU dies by a signal: a cabind that
// adopted the VM is not the wrap's parent, and learns how QEMU ended only from it.
#pragma once

namespace cabin::drivers {

inline constexpr char kWrapFailurePrefix[] = "cabin-vmm-wrap: ";

}  // namespace cabin::drivers
