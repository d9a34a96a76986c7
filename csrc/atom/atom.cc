// atom.cc — names for the Atom contract's enums (used in error messages).
#include "atom/atom.h"

namespace purlin::atom {

const char* flag_kind_name(FlagKind k) {
  switch (k) {
    case FlagKind::Arrive: return "arrive";
    case FlagKind::Staged: return "staged";
    case FlagKind::Consumed: return "consumed";
    default: return "?";
  }
}

}  // namespace purlin::atom
