// This host's name, as failures and the rendezvous report it.
#pragma once

#include <string>

namespace dtrun {

std::string LocalHostName();

}  // namespace dtrun
