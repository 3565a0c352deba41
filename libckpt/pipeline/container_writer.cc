#include "pipeline/container_writer.h"

namespace ckpt {

std::unique_ptr<ContainerWriter> MakeCkptFileWriter();
std::unique_ptr<ContainerWriter> MakeHdf5FileWriter();

void ContainerWriter::Abandon() {
  if (file_ == nullptr) return;
  (void)file_->Drain();
  file_.reset();
}

DataContainer ResolveContainer(DataContainer container, std::string_view root_uri) {
  if (container != DataContainer::kAuto) return container;
  return root_uri.substr(0, 7) == "hdf5://" ? DataContainer::kHdf5 : DataContainer::kCkpt;
}

std::unique_ptr<ContainerWriter> MakeContainerWriter(DataContainer container) {
  return container == DataContainer::kHdf5 ? MakeHdf5FileWriter() : MakeCkptFileWriter();
}

}  // namespace ckpt
