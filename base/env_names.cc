#include "base/env_names.h"
