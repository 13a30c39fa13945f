// runnel: the node supervisor. All logic is in the runnel_supervisor library.
#include "supervisor/app.h"

int main(int argc, char** argv) { return runnel::supervisor::Main(argc, argv); }
